#ifndef PERIMETER_CMICROHTTPD_SHIM_H
#define PERIMETER_CMICROHTTPD_SHIM_H
#include <stdarg.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <netdb.h>
#include <microhttpd.h>

/* MHD_start_daemon and MHD_get_connection_info are variadic, which Swift cannot call: these
   two fixed-argument helpers are the only C here. */

/** Starts a daemon on an already listening socket with every limit the server sets. */
static inline struct MHD_Daemon *perimeter_mhd_start(
    unsigned int flags, int listen_socket, unsigned int threads, unsigned int connection_limit,
    unsigned int per_ip_limit, unsigned int timeout_seconds, size_t memory_limit,
    MHD_AccessHandlerCallback handler, void *handler_cls, MHD_RequestCompletedCallback completed,
    MHD_LogCallback logger, void *logger_cls)
{
    return MHD_start_daemon(
        flags, 0, NULL, NULL, handler, handler_cls,
        /* First, so that libmicrohttpd's messages about the options below reach it too. */
        MHD_OPTION_EXTERNAL_LOGGER, logger, logger_cls,
        MHD_OPTION_LISTEN_SOCKET, (MHD_socket)listen_socket,
        MHD_OPTION_THREAD_POOL_SIZE, threads,
        MHD_OPTION_CONNECTION_LIMIT, connection_limit,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip_limit,
        MHD_OPTION_CONNECTION_TIMEOUT, timeout_seconds,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, memory_limit,
        MHD_OPTION_NOTIFY_COMPLETED, completed, handler_cls,
        MHD_OPTION_END);
}

/** The client's address (IPv4 or IPv6) written into `address` as text; 0 on success. */
static inline int perimeter_mhd_client_address(struct MHD_Connection *connection, char *address, size_t size)
{
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (info == NULL || info->client_addr == NULL) return -1;
    return getnameinfo(info->client_addr,
                       info->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in),
                       address, (socklen_t)size, NULL, 0, NI_NUMERICHOST);
}

#endif
