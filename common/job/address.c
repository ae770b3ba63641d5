/* address.c - "host:port" addresses (see address.h). */
#include "psflow/address.h"

#include <stdlib.h>
#include <string.h>

int pf_split_host_port(const char *addr, char *host, size_t len, int *port) {
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr || (size_t)(colon - addr) >= len || !colon[1])
        return -1;
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end || p < 0 || p > 65535)
        return -1;
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    *port = (int)p;
    return 0;
}
