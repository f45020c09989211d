#ifndef CURING_SHIM_H
#define CURING_SHIM_H

// Swift's importer clashes with Glibc's module when liburing.h is the first header it sees, so the
// system headers liburing needs come first.
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <sys/ioctl.h>
#include <signal.h>
#include <time.h>
#include <fcntl.h>
#include <errno.h>
#include <poll.h>
#include <unistd.h>
#include <string.h>
#include <sys/syscall.h>
#include <linux/stat.h>
// swift-system's CSystem module includes the kernel's <linux/io_uring.h>; liburing carries its own copy
// under the same include guard with slightly different types. Including the kernel's first makes both
// modules see one definition of the ring structures, which the importer requires.
#include <linux/io_uring.h>
#include <liburing.h>

// Glibc declares these only under _GNU_SOURCE, which Swift's Glibc module is built without.
extern ssize_t preadv2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags);
extern ssize_t pwritev2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags);
extern int pipe2(int pipefd[2], int flags);
extern int statx(int dirfd, const char *restrict pathname, int flags, unsigned int mask,
                 struct statx *restrict statxbuf);

// openat2(2), which glibc does not wrap (and `syscall` is variadic).
static inline int curing_openat2(int dirfd, const char *path, struct open_how *how) {
    return (int)syscall(SYS_openat2, dirfd, path, how, sizeof *how);
}

// The number of CPUs in the calling thread's affinity mask (up to 1,024), or 0 when it cannot be read. The
// raw call: glibc's wrapper and CPU_COUNT need _GNU_SOURCE too. The kernel returns the bytes it wrote.
static inline int curing_affinity_cpu_count(void) {
    unsigned long mask[16];
    long size = syscall(SYS_sched_getaffinity, 0, sizeof mask, mask);
    if (size <= 0) return 0;
    int count = 0;
    for (long word = 0; word < size / (long)sizeof mask[0]; word++) count += __builtin_popcountl(mask[word]);
    return count;
}

// The calling thread's id, which Glibc's Swift module does not declare (`gettid` needs _GNU_SOURCE).
static inline pid_t curing_gettid(void) {
    return (pid_t)syscall(SYS_gettid);
}

// `statx` the function collides with `struct statx` in Swift; this name does not.
static inline int callStatx(int dirfd, const char *pathname, int flags, unsigned int mask, struct statx *buffer) {
    return statx(dirfd, pathname, flags, mask, buffer);
}

// liburing 2.3 declares io_uring_enable_rings but does not export it; this is the system call it makes.
static inline int curing_enable_rings(struct io_uring *ring) {
    int rc = (int)syscall(__NR_io_uring_register, ring->ring_fd, IORING_REGISTER_ENABLE_RINGS, NULL, 0);
    return rc < 0 ? -errno : rc;
}

// The ring thread's wake-up without a descriptor: it keeps an IORING_OP_FUTEX_WAIT (Linux 6.7; used from
// 6.8) pending on a word, and a thread with work for it bumps the word and wakes the futex. liburing 2.3 predates
// the opcode, so the SQE is filled here as its later io_uring_prep_futex_wait does: the futex2 flags in
// `fd`, the expected value in `off`, the bitset in `addr3`.
#define CURING_OP_FUTEX_WAIT 51
#define CURING_FUTEX2_SIZE_U32 0x02
#define CURING_FUTEX2_PRIVATE 128

static inline void curing_prep_futex_wait(struct io_uring_sqe *sqe, uint32_t *word, uint32_t expected) {
    io_uring_prep_rw(CURING_OP_FUTEX_WAIT, sqe, CURING_FUTEX2_SIZE_U32 | CURING_FUTEX2_PRIVATE, word, 0, expected);
    sqe->addr3 = 0xffffffffu;
}

// IORING_OP_FIXED_FD_INSTALL (Linux 6.8): a registered (direct) descriptor given an ordinary descriptor in
// the process's table, with O_CLOEXEC (install_fd_flags 0, in the union of rw_flags). liburing 2.3 predates
// it, so the SQE is filled here as its later io_uring_prep_fixed_fd_install does.
#define CURING_OP_FIXED_FD_INSTALL 54

static inline void curing_prep_fixed_fd_install(struct io_uring_sqe *sqe, unsigned slot) {
    io_uring_prep_rw(CURING_OP_FIXED_FD_INSTALL, sqe, (int)slot, NULL, 0, 0);
    sqe->flags = IOSQE_FIXED_FILE;
    sqe->rw_flags = 0;
}

static inline uint32_t curing_futex_load(uint32_t *word) {
    return __atomic_load_n(word, __ATOMIC_SEQ_CST);
}

static inline void curing_futex_bump_and_wake(uint32_t *word) {
    __atomic_fetch_add(word, 1, __ATOMIC_SEQ_CST);
    syscall(__NR_futex, word, 1 /* FUTEX_WAKE */ | 128 /* FUTEX_PRIVATE_FLAG */, 1, NULL, NULL, 0);
}

// The ring without a descriptor. The ring thread registers the ring's descriptor with itself (5.18) and,
// where the kernel takes register calls through that registration too (6.3, IORING_REGISTER_USE_
// REGISTERED_RING), closes it: the engine then holds no slot in the process's descriptor table, which a
// process near its limit needs for its files. Only the registering thread can use the ring afterwards,
// which is the ring thread's rule anyway. Returns 1 when the descriptor was closed, 0 when it was kept.
#define CURING_REGISTER_USE_REGISTERED_RING (1U << 31)

static inline int curing_drop_ring_fd(struct io_uring *ring) {
    if (io_uring_register_ring_fd(ring) != 1) return 0;
    // A harmless register call through the registration says whether the kernel takes them that way.
    char probe[sizeof(struct io_uring_probe) + 8 * sizeof(struct io_uring_probe_op)];
    memset(probe, 0, sizeof probe);
    long rc = syscall(__NR_io_uring_register, ring->enter_ring_fd,
                      IORING_REGISTER_PROBE | CURING_REGISTER_USE_REGISTERED_RING, probe, 8);
    if (rc < 0) return 0;
    close(ring->ring_fd);
    // liburing's io_uring_queue_exit closes ring_fd: -1 keeps it from closing whatever took the number.
    // The registration goes when the ring thread exits, and the ring with it.
    ring->ring_fd = -1;
    return 1;
}

// io_uring_register_files_update, through the registration once the descriptor is closed.
static inline int curing_register_files_update(struct io_uring *ring, unsigned offset, int *fds, unsigned count) {
    struct io_uring_files_update update;
    memset(&update, 0, sizeof update);
    update.offset = offset;
    update.fds = (unsigned long)fds;
    int fd = ring->ring_fd;
    unsigned opcode = IORING_REGISTER_FILES_UPDATE;
    if (fd < 0) {
        fd = ring->enter_ring_fd;
        opcode |= CURING_REGISTER_USE_REGISTERED_RING;
    }
    long rc = syscall(__NR_io_uring_register, fd, opcode, &update, count);
    return rc < 0 ? -errno : (int)rc;
}

#define CURING_RWF_NOWAIT 0x00000008
#define CURING_POLLRDHUP 0x2000
#define CURING_F_SETPIPE_SZ 1031
#define CURING_F_GETPIPE_SZ 1032

#endif
