/* address.h - network addresses as the job describes them: "host:port" strings, as written
 * in TF_CONFIG, the --listen and --advertise options and an agent's registration.
 */
#ifndef PSFLOW_ADDRESS_H
#define PSFLOW_ADDRESS_H

#include <stddef.h>

/* Splits "host:port" at its last colon into host[len] and *port (0..65535). Returns 0, or
 * -1 when there is no colon, the host is empty or too long, or the port is not a number. */
int pf_split_host_port(const char *addr, char *host, size_t len, int *port);

#endif
