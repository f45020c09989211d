#ifndef CURING_SHIM_H
#define CURING_SHIM_H

// Swift's importer clashes with Glibc's module when liburing.h is the first header it sees, so the
// system headers liburing needs come first.
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <sys/eventfd.h>
#include <signal.h>
#include <time.h>
#include <fcntl.h>
#include <poll.h>
#include <liburing.h>

#endif
