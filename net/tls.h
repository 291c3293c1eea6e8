/*
 * tls.h - TLS 1.2 over memory buffers (mbedTLS), the server's side and
 * the client's.
 *
 * Pure: ciphertext in, plaintext out and back, no sockets. The connection
 * feeds what it reads from the socket to net_tls_input, pulls plaintext
 * with net_tls_read (which also drives the handshake), and sends whatever
 * net_tls_take_output hands it after every call. Only TLS 1.2 with ECDHE
 * and an AEAD (AES-GCM, ChaCha20-Poly1305); no ALPN (HTTP/1.1 is assumed),
 * no renegotiation, no session resumption.
 *
 * A failed handshake or a bad record is final: every later call returns
 * the same error; the connection sends the output left (a fatal alert)
 * and closes.
 */
#ifndef NET_TLS_H
#define NET_TLS_H

#include "runtime/buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Our codes: the -2000 range of runtime/err.h, described by rt_strerror. */
enum {
    NET_TLS_CLOSED = -2001, /* the peer sent close_notify */
    NET_TLS_EPROTO = -2002, /* handshake refused, bad record, ...: net_tls_error says */
    NET_TLS_EFULL = -2003,  /* more than NET_TLS_INPUT_MAX bytes of input not read yet */
    NET_TLS_ESTATE = -2004, /* a write before the handshake is done or after net_tls_close */
    NET_TLS_ENOMEM = -2005,
    NET_TLS_EINVAL = -2006,
};

/* Input waiting for net_tls_read: one 64 KiB socket read on top of an
 * unfinished record, with room to spare. */
#define NET_TLS_INPUT_MAX (128u << 10)

/* Certificate and key. Read-only once made: shared by every connection on
 * every thread. */
typedef struct net_tls_config net_tls_config;

/* Load a PEM certificate chain (leaf first) and its unencrypted private key.
 * On failure err gets one line (file missing, not PEM, key does not match
 * the certificate, ...) and a negative code returns. */
int net_tls_config_new(const char *cert_file, const char *key_file, net_tls_config **out, char *err,
                       size_t errlen);
void net_tls_config_free(net_tls_config *c); /* after every net_tls of it is freed */

/* The client's: the same versions and suites, the server's certificate
 * verified against the PEM bundle ca_file (NULL: NET_TLS_SYSTEM_CA) unless
 * verify is false (--insecure). */
#define NET_TLS_SYSTEM_CA "/etc/ssl/certs/ca-certificates.crt"
int net_tls_client_config_new(const char *ca_file, bool verify, net_tls_config **out, char *err,
                              size_t errlen);

/* One per connection, used by one thread at a time. NULL on allocation failure. */
typedef struct net_tls net_tls;
net_tls *net_tls_new(net_tls_config *c);
/* A client's, to host (a name: sent as SNI and checked against the
 * certificate's DNS names; an address: checked against its IP SANs).
 * Writing is allowed once net_tls_read says the handshake is done; a
 * certificate refused makes net_tls_error say why. */
net_tls *net_tls_new_client(net_tls_config *c, const char *host);
void net_tls_free(net_tls *t);

/* Bytes read from the socket (copied). NET_TLS_EFULL past NET_TLS_INPUT_MAX. */
int net_tls_input(net_tls *t, const uint8_t *data, size_t len);
/* Drive the handshake, then decrypt up to cap bytes into out (cap 0: only
 * the handshake). Returns the count (call again: more may be ready), 0 when
 * more input is needed, NET_TLS_CLOSED once the peer sent close_notify, or
 * another error. */
ssize_t net_tls_read(net_tls *t, uint8_t *out, size_t cap);
/* Encrypt all of data into the output. Only once the handshake is done. */
int net_tls_write(net_tls *t, const uint8_t *data, size_t len);
/* Queue a close_notify; writes are refused from then on. */
int net_tls_close(net_tls *t);

/* The ciphertext waiting to be sent, as one buffer whose reference the
 * caller owns (rt_buf_unref once written), or *out = NULL when there is
 * none. NET_TLS_ENOMEM leaves the bytes queued. */
int net_tls_take_output(net_tls *t, rt_buf **out);
size_t net_tls_pending_output(const net_tls *t);

bool net_tls_handshake_done(const net_tls *t);

/* Between two records: the handshake over, no error, no close, and nothing
 * held, in either direction (input not read, plaintext not taken, output
 * not taken). Such a session may go on on another thread: the connection
 * moves to its conversations' loop (net/conn.c). */
bool net_tls_idle(const net_tls *t);

/* The last error in one line ("" when none). */
const char *net_tls_error(const net_tls *t);

#endif
