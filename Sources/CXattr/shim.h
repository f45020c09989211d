#ifndef CXATTR_SHIM_H
#define CXATTR_SHIM_H

// Extended attributes, which Swift's Glibc module leaves out: dcopy -p copies POSIX ACLs through them.
#include <sys/types.h>
#include <sys/xattr.h>

#endif
