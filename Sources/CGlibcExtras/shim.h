#ifndef CGLIBCEXTRAS_SHIM_H
#define CGLIBCEXTRAS_SHIM_H

// What Swift's Glibc module leaves out: extended attributes (dcopy -p copies POSIX ACLs through them),
// `fstatfs`, whose file-system type tells dcat the kernel's own files, `openat2`, which glibc
// does not wrap (and `syscall` is variadic, so Swift cannot call it), `mallopt` (malloc.h), and `pipe2`
// (a _GNU_SOURCE call, for the tests' packet-mode pipes).
#include <sys/types.h>
#include <sys/xattr.h>
#include <sys/vfs.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/openat2.h>
#include <malloc.h>

/// openat(2) that refuses to follow a magic link (`/proc/self/fd/N`, `/proc/self/cwd`) with ELOOP.
/// With `O_PATH | O_NOFOLLOW` a magic link that is the last component is opened itself. Fails with
/// ENOSYS before Linux 5.6, or where a seccomp filter does not know the call.
static inline int glibc_extras_open_without_magic_links(int directory, const char *path, int flags) {
    struct open_how how = {.flags = (unsigned long long)(unsigned int)flags, .mode = 0, .resolve = RESOLVE_NO_MAGICLINKS};
    return (int)syscall(SYS_openat2, directory, path, &how, sizeof how);
}

/// Limits glibc's malloc to `count` arenas (`M_ARENA_MAX`); 1 on success, 0 on failure.
static inline int glibc_extras_limit_malloc_arenas(int count) {
    return mallopt(M_ARENA_MAX, count);
}

/// pipe2(2), which glibc declares only under _GNU_SOURCE (Swift's Glibc module is built without it): the
/// tests make packet-mode pipes with it (`__O_DIRECT`, `O_DIRECT`'s value, is visible to Swift).
static inline int glibc_extras_pipe2(int ends[2], int flags) {
    extern int pipe2(int pipedes[2], int flags);
    return pipe2(ends, flags);
}

#endif
