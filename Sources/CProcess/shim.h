#ifndef PERIMETER_CPROCESS_SHIM_H
#define PERIMETER_CPROCESS_SHIM_H
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

// pidfd_open(2) (Linux 5.3): a descriptor that turns readable when the process ends, so a
// wait for a child is a poll on it instead of waitpid(WNOHANG) in a loop. glibc wraps it only
// from 2.36 and Swift cannot call the variadic syscall(2); -1 with errno (ENOSYS on an older
// kernel, ESRCH once the child is reaped) when it cannot.
static inline int perimeter_pidfd_open(pid_t pid) {
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    errno = ENOSYS;
    return -1;
#endif
}
#endif
