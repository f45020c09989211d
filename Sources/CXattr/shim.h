#ifndef CXATTR_SHIM_H
#define CXATTR_SHIM_H

// What Swift's Glibc module leaves out: extended attributes (dcopy -p copies POSIX ACLs through them) and
// `fstatfs`, whose file-system type tells dcat the kernel's own files.
#include <sys/types.h>
#include <sys/xattr.h>
#include <sys/vfs.h>

#endif
