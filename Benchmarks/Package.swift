// swift-tools-version: 6.1
// Benchmarks live in their own package so that the library's build and CI never compile them.
// (The engine benchmark is `uring-demo bench` in the main package: the engine is internal to it.)
// Each program runs this library and its peer (the toolchain's libdispatch, cat, cp) side by side,
// alternating A B A B, and prints medians and ratios. Build with `swift build -c release` here.
import PackageDescription

let package = Package(
    name: "Benchmarks",
    dependencies: [
        .package(name: "swift-dispatch-uring", path: ".."),
        .package(url: "https://github.com/apple/swift-system", from: "1.4.0"),
    ],
    targets: [
        .executableTarget(
            name: "DataBenchmark",
            dependencies: [
                .product(name: "DispatchData", package: "swift-dispatch-uring"),
                .product(name: "DispatchDataBridge", package: "swift-dispatch-uring"),
            ]
        ),
        .executableTarget(
            name: "IOBenchmark",
            dependencies: [
                .product(name: "DispatchIO", package: "swift-dispatch-uring"),
                .product(name: "DispatchQueues", package: "swift-dispatch-uring"),
                .product(name: "DispatchData", package: "swift-dispatch-uring"),
                .product(name: "SystemPackage", package: "swift-system"),
            ]
        ),
        .executableTarget(
            name: "QueuesBenchmark",
            dependencies: [.product(name: "DispatchQueues", package: "swift-dispatch-uring")]
        ),
    ]
)
package.swiftLanguageModes = [.v6]
