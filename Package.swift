// swift-tools-version: 6.2
import PackageDescription

// The tools' release builds are static executables: no dynamic loader, no relocations, and no libstdc++.so,
// whose loading and initialisation alone cost a trivial Swift program 0.6 ms of 1.3 here. Measured on
// `dcat` of an empty file (hyperfine, alternating): 4.0 ms with only the Swift runtime linked statically,
// 1.4 ms static (cat: 0.6 ms; a trivial Swift program with the runtime linked statically, the issue's
// reference: 1.2 ms). Debug builds keep glibc dynamic, because the sanitizers' runtimes cannot link into a
// static executable (`swift test --sanitize=thread` fails on `_DYNAMIC`); the test script runs the tool
// tests on the release binaries too. ArgumentParser brings in FoundationEssentials, whose static archive
// needs its two helper libraries named here; lld links it without the warnings gold prints for the
// archive's use of mktemp and glibc's of dlopen.
//
// The release link also lays out first, and together, the functions and data a run of the tools touches
// (Scripts/startup.order, made by Scripts/startup-order.sh), so that fewer pages of the binary are faulted
// in, copied on write and unmapped again at exit. dcat of an empty file: 5.5 -> 3.1-3.3 MiB peak resident,
// 159 -> 101 page faults, 0.70x the time (600 alternating runs, 2.75 -> 1.94 ms while cat took 1.52).
let startupOrder = Context.packageDirectory + "/Scripts/startup.order"
let toolLinkerSettings: [LinkerSetting] = [
    .unsafeFlags(
        [
            "-static-executable", "-use-ld=lld", "-Xlinker", "--symbol-ordering-file=\(startupOrder)",
            // Names the order file has and a build does not (the other tool's, or a function renamed since).
            "-Xlinker", "--no-warn-symbol-ordering",
        ],
        .when(configuration: .release)
    ),
    .unsafeFlags(["-static-stdlib", "-use-ld=lld"], .when(configuration: .debug)),
    .linkedLibrary("_FoundationCollections"),
    .linkedLibrary("_FoundationCShims"),
]

let package = Package(
    name: "swift-dispatch-uring",
    products: [
        .library(name: "DispatchData", targets: ["DispatchData"]),
        .library(name: "DispatchDataBridge", targets: ["DispatchDataBridge"]),
        .library(name: "DispatchQueues", targets: ["DispatchQueues"]),
        .library(name: "DispatchIO", targets: ["DispatchIO"]),
        .executable(name: "dcat", targets: ["dcat"]),
        .executable(name: "dcopy", targets: ["dcopy"]),
        .executable(name: "uring-demo", targets: ["uring-demo"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-system", from: "1.4.0"),
        .package(url: "https://github.com/x-sheep/swift-property-based", from: "2.0.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
    ],
    targets: [
        // liburing, found through pkg-config (Debian: liburing-dev).
        .systemLibrary(
            name: "CURing",
            pkgConfig: "liburing",
            providers: [.apt(["liburing-dev"])]
        ),
        // The only code that talks to io_uring (and its POSIX stand-in). Internal to the package.
        .target(
            name: "URing",
            dependencies: ["CURing", .product(name: "SystemPackage", package: "swift-system")]
        ),
        .target(name: "DispatchData"),
        .target(name: "DispatchDataBridge", dependencies: ["DispatchData"]),
        .target(
            name: "DispatchQueues",
            dependencies: ["URing", .product(name: "SystemPackage", package: "swift-system")]
        ),
        .target(
            name: "DispatchIO",
            dependencies: [
                "DispatchData", "DispatchQueues", "URing",
                .product(name: "SystemPackage", package: "swift-system"),
            ]
        ),
        // System headers the Glibc module leaves out: extended attributes (sys/xattr.h), statfs, openat2 and mallopt.
        .systemLibrary(name: "CGlibcExtras"),
        // What the two tools share: file names as bytes, cp's and cat's quoting of them in messages, and
        // cp -p's copy of ACLs.
        .target(
            name: "ToolSupport",
            dependencies: ["CGlibcExtras", .product(name: "SystemPackage", package: "swift-system")]
        ),
        .executableTarget(
            name: "dcat",
            dependencies: [
                "DispatchIO", "ToolSupport", .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            linkerSettings: toolLinkerSettings
        ),
        .executableTarget(
            name: "dcopy",
            dependencies: [
                "DispatchIO", "ToolSupport", .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            linkerSettings: toolLinkerSettings
        ),
        .executableTarget(
            name: "uring-demo",
            dependencies: ["URing", .product(name: "SystemPackage", package: "swift-system")]
        ),
        .testTarget(
            name: "URingTests",
            dependencies: ["URing", .product(name: "SystemPackage", package: "swift-system")]
        ),
        .testTarget(
            name: "DispatchDataTests",
            dependencies: ["DispatchData", .product(name: "PropertyBased", package: "swift-property-based")]
        ),
        .testTarget(name: "DispatchDataBridgeTests", dependencies: ["DispatchDataBridge"]),
        .testTarget(name: "DispatchQueuesTests", dependencies: ["DispatchQueues"]),
        .testTarget(name: "DispatchIOTests", dependencies: ["DispatchIO"]),
        // Runs the dcat and dcopy binaries that `swift build --build-tests` puts next to the test bundle
        // (it builds every product); it does not link them, so their static runtime stays out of it.
        .testTarget(name: "ToolTests", dependencies: ["CGlibcExtras"]),
        .testTarget(name: "ToolSupportTests", dependencies: ["ToolSupport", "CGlibcExtras"]),
    ]
)

// Settings every target shares: Swift 6 mode and explicit imports.
//
// The package's own code reaches the metadata of concrete generic types (a `[Int32: FileEntry]`'s storage)
// through accessors instead of mangled names: a mangled name is resolved at run time, and resolving one
// with a conformance in it (`Int32: Hashable`) scans every protocol conformance in the process, 3,900 of
// them in the tools. Measured on `dcat` of an empty file, whose first read made eight such lookups: 1.23
// against 1.03 ms (hyperfine, alternating). The price is a little code size. SwiftPM accepts this flag in a
// package used as a dependency from tools version 6.2 on.
for target in package.targets where target.type != .system {
    var settings = target.swiftSettings ?? []
    settings.append(.enableUpcomingFeature("MemberImportVisibility"))
    if target.type != .test {
        settings.append(
            .unsafeFlags(["-Xfrontend", "-disable-concrete-type-metadata-mangled-name-accessors"])
        )
    }
    target.swiftSettings = settings
}
package.swiftLanguageModes = [.v6]
