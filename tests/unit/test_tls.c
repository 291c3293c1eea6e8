/*
 * test_tls.c - the TLS server engine against an mbedTLS client, all in
 * memory: handshakes with EC and RSA certificates (made here with mbedTLS,
 * no openssl binary), data both ways in any split, close_notify, refusal
 * of TLS 1.0/1.1 and of suites without ECDHE or an AEAD, garbage and
 * forged records, the input bound, configuration errors, and one config
 * shared by handshakes on several threads.
 */
#include "net/tls.h"
#include "runtime/err.h"

#include "support_store.h"
#include "support_sync.h"

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>

#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ fixtures --- */

static mbedtls_entropy_context entropy;
static mbedtls_ctr_drbg_context drbg;
static char *dir;
static char ec_crt[512], ec_key[512]; /* a self-signed P-256 certificate for localhost */

static void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

static void new_key(mbedtls_pk_context *pk, bool rsa)
{
    mbedtls_pk_init(pk);
    ck_assert_int_eq(
        mbedtls_pk_setup(pk, mbedtls_pk_info_from_type(rsa ? MBEDTLS_PK_RSA : MBEDTLS_PK_ECKEY)),
        0);
    if (rsa)
        ck_assert_int_eq(
            mbedtls_rsa_gen_key(mbedtls_pk_rsa(*pk), mbedtls_ctr_drbg_random, &drbg, 2048, 65537),
            0);
    else
        ck_assert_int_eq(mbedtls_ecp_gen_key(MBEDTLS_ECP_DP_SECP256R1, mbedtls_pk_ec(*pk),
                                             mbedtls_ctr_drbg_random, &drbg),
                         0);
}

/* <dir>/<name>.crt and .key: a self-signed certificate for CN=localhost. */
static void make_cert(const char *name, bool rsa, char *crt, char *key, size_t cap)
{
    mbedtls_pk_context pk;
    new_key(&pk, rsa);
    static unsigned char pem[16384];
    snprintf(key, cap, "%s/%s.key", dir, name);
    ck_assert_int_eq(mbedtls_pk_write_key_pem(&pk, pem, sizeof(pem)), 0);
    write_file(key, pem, strlen((char *)pem));

    mbedtls_x509write_cert w;
    mbedtls_mpi serial;
    mbedtls_x509write_crt_init(&w);
    mbedtls_mpi_init(&serial);
    ck_assert_int_eq(mbedtls_mpi_lset(&serial, 1), 0);
    mbedtls_x509write_crt_set_version(&w, MBEDTLS_X509_CRT_VERSION_3);
    mbedtls_x509write_crt_set_md_alg(&w, MBEDTLS_MD_SHA256);
    mbedtls_x509write_crt_set_subject_key(&w, &pk);
    mbedtls_x509write_crt_set_issuer_key(&w, &pk);
    ck_assert_int_eq(mbedtls_x509write_crt_set_subject_name(&w, "CN=localhost"), 0);
    ck_assert_int_eq(mbedtls_x509write_crt_set_issuer_name(&w, "CN=localhost"), 0);
    ck_assert_int_eq(mbedtls_x509write_crt_set_serial(&w, &serial), 0);
    ck_assert_int_eq(mbedtls_x509write_crt_set_validity(&w, "20200101000000", "20991231235959"), 0);
    ck_assert_int_eq(
        mbedtls_x509write_crt_pem(&w, pem, sizeof(pem), mbedtls_ctr_drbg_random, &drbg), 0);
    snprintf(crt, cap, "%s/%s.crt", dir, name);
    write_file(crt, pem, strlen((char *)pem));
    mbedtls_x509write_crt_free(&w);
    mbedtls_mpi_free(&serial);
    mbedtls_pk_free(&pk);
}

static void setup(void)
{
    mbedtls_entropy_init(&entropy);
    mbedtls_ctr_drbg_init(&drbg);
    ck_assert_int_eq(mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &entropy, NULL, 0), 0);
    dir = tst_mkdtemp();
    make_cert("ec", false, ec_crt, ec_key, sizeof(ec_crt));
}

static void teardown(void)
{
    tst_rmdir(dir);
    free(dir);
    mbedtls_ctr_drbg_free(&drbg);
    mbedtls_entropy_free(&entropy);
}

static net_tls_config *config(const char *crt, const char *key)
{
    char err[256] = "";
    net_tls_config *c = NULL;
    int r = net_tls_config_new(crt, key, &c, err, sizeof(err));
    ck_assert_msg(r == 0, "config: %d %s", r, err);
    return c;
}

/* -------------------------------------------------------------- a client --- */

typedef struct bytes {
    uint8_t *p;
    size_t len, off, cap;
} bytes;

static int bytes_add(bytes *b, const uint8_t *p, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (q == NULL)
            return -1;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

typedef struct client {
    mbedtls_ssl_config conf;
    mbedtls_ssl_context ssl;
    mbedtls_x509_crt ca;
    bytes to_server, to_client;
} client;

static int cli_send(void *ctx, const unsigned char *p, size_t n)
{
    client *c = ctx;
    return bytes_add(&c->to_server, p, n) == 0 ? (int)n : MBEDTLS_ERR_SSL_ALLOC_FAILED;
}

static int cli_recv(void *ctx, unsigned char *p, size_t n)
{
    bytes *b = &((client *)ctx)->to_client;
    if (b->off == b->len)
        return MBEDTLS_ERR_SSL_WANT_READ;
    if (n > b->len - b->off)
        n = b->len - b->off;
    memcpy(p, b->p + b->off, n);
    b->off += n;
    return (int)n;
}

/* A client trusting the certificate in crt, offering TLS 1.<min-1>..1.<max-1>
 * (minor versions 1..3) and `suites` (NULL: mbedTLS's defaults). Returns 0
 * or an mbedTLS error, without ck_assert, for use on other threads. */
static int client_init(client *c, const char *crt, int min, int max, const int *suites)
{
    memset(c, 0, sizeof(*c));
    mbedtls_ssl_config_init(&c->conf);
    mbedtls_ssl_init(&c->ssl);
    mbedtls_x509_crt_init(&c->ca);
    int r = mbedtls_x509_crt_parse_file(&c->ca, crt);
    if (r == 0)
        r = mbedtls_ssl_config_defaults(&c->conf, MBEDTLS_SSL_IS_CLIENT,
                                        MBEDTLS_SSL_TRANSPORT_STREAM, MBEDTLS_SSL_PRESET_DEFAULT);
    if (r != 0)
        return r;
    mbedtls_ssl_conf_authmode(&c->conf, MBEDTLS_SSL_VERIFY_REQUIRED);
    mbedtls_ssl_conf_ca_chain(&c->conf, &c->ca, NULL);
    mbedtls_ssl_conf_rng(&c->conf, mbedtls_ctr_drbg_random, &drbg);
    mbedtls_ssl_conf_min_version(&c->conf, MBEDTLS_SSL_MAJOR_VERSION_3, min);
    mbedtls_ssl_conf_max_version(&c->conf, MBEDTLS_SSL_MAJOR_VERSION_3, max);
    if (suites != NULL)
        mbedtls_ssl_conf_ciphersuites(&c->conf, suites);
    r = mbedtls_ssl_setup(&c->ssl, &c->conf);
    if (r == 0)
        r = mbedtls_ssl_set_hostname(&c->ssl, "localhost");
    mbedtls_ssl_set_bio(&c->ssl, c, cli_send, cli_recv, NULL);
    return r;
}

static void client_free(client *c)
{
    mbedtls_ssl_free(&c->ssl);
    mbedtls_ssl_config_free(&c->conf);
    mbedtls_x509_crt_free(&c->ca);
    free(c->to_server.p);
    free(c->to_client.p);
}

/* The server's output to the client. */
static int deliver(net_tls *t, client *c)
{
    rt_buf *b;
    int r = net_tls_take_output(t, &b);
    if (r != 0)
        return r;
    if (b != NULL) {
        r = bytes_add(&c->to_client, rt_buf_data(b), rt_buf_len(b));
        rt_buf_unref(b);
    }
    return r;
}

/* What the client sent, into the server in pieces of `step` bytes (0: at
 * once), reading plaintext after each into `got` (NULL: handshake only). */
static ssize_t feed(net_tls *t, client *c, size_t step, bytes *got)
{
    uint8_t buf[5000];
    while (c->to_server.off < c->to_server.len) {
        size_t n = c->to_server.len - c->to_server.off;
        if (step != 0 && n > step)
            n = step;
        int r = net_tls_input(t, c->to_server.p + c->to_server.off, n);
        if (r != 0)
            return r;
        c->to_server.off += n;
        for (;;) {
            ssize_t k = net_tls_read(t, got ? buf : NULL, got ? sizeof(buf) : 0);
            if (k < 0)
                return k;
            if (k == 0)
                break;
            if (bytes_add(got, buf, (size_t)k) != 0)
                return NET_TLS_ENOMEM;
        }
    }
    return deliver(t, c);
}

/* Run both sides until both finish the handshake. 0, or the server's error
 * (negative, NET_TLS_*), or the client's (an mbedTLS code). */
static int handshake(net_tls *t, client *c, size_t step)
{
    for (int i = 0; i < 100; i++) {
        int cr = mbedtls_ssl_handshake(&c->ssl);
        if (cr != 0 && cr != MBEDTLS_ERR_SSL_WANT_READ)
            return cr;
        int sr = (int)feed(t, c, step, NULL);
        if (sr == 0)
            sr = (int)net_tls_read(t, NULL, 0);
        if (sr != 0) {
            deliver(t, c); /* the alert */
            return sr;
        }
        if (cr == 0 && net_tls_handshake_done(t))
            return 0;
    }
    return -1;
}

static void client_write(client *c, const uint8_t *p, size_t n)
{
    for (size_t at = 0; at < n;) {
        int r = mbedtls_ssl_write(&c->ssl, p + at, n - at);
        ck_assert_int_gt(r, 0);
        at += (size_t)r;
    }
}

static void client_read(client *c, uint8_t *p, size_t n)
{
    for (size_t at = 0; at < n;) {
        int r = mbedtls_ssl_read(&c->ssl, p + at, n - at);
        ck_assert_msg(r > 0, "client read: -0x%04x", (unsigned)-r);
        at += (size_t)r;
    }
}

static void connect_ok(net_tls_config *cfg, const char *crt, net_tls **t, client *c, size_t step)
{
    ck_assert_int_eq(client_init(c, crt, 3, 3, NULL), 0);
    *t = net_tls_new(cfg);
    ck_assert_ptr_nonnull(*t);
    int r = handshake(*t, c, step);
    ck_assert_msg(r == 0, "handshake: %d (-0x%04x) %s", r, (unsigned)-r, net_tls_error(*t));
    ck_assert_uint_eq(mbedtls_ssl_get_verify_result(&c->ssl), 0);
    ck_assert_str_eq(mbedtls_ssl_get_version(&c->ssl), "TLSv1.2");
}

/* --------------------------------------------------------------- tests --- */

START_TEST(test_handshake_and_echo)
{
    net_tls_config *cfg = config(ec_crt, ec_key);
    for (size_t step = 0; step <= 3; step++) {
        net_tls *t;
        client c;
        connect_ok(cfg, ec_crt, &t, &c, step == 3 ? 1 : step * 7);
        ck_assert_str_eq(mbedtls_ssl_get_ciphersuite(&c.ssl),
                         "TLS-ECDHE-ECDSA-WITH-AES-128-GCM-SHA256");
        ck_assert_str_eq(net_tls_error(t), "");

        client_write(&c, (const uint8_t *)"GET / HTTP/1.1\r\n\r\n", 18);
        bytes got = {0};
        ck_assert_int_eq(feed(t, &c, step, &got), 0);
        ck_assert_uint_eq(got.len, 18);
        ck_assert(memcmp(got.p, "GET / HTTP/1.1\r\n\r\n", 18) == 0);
        free(got.p);

        ck_assert_int_eq(net_tls_write(t, (const uint8_t *)"HTTP/1.1 200 OK\r\n", 17), 0);
        ck_assert_uint_gt(net_tls_pending_output(t), 17);
        ck_assert_int_eq(deliver(t, &c), 0);
        ck_assert_uint_eq(net_tls_pending_output(t), 0);
        rt_buf *none = (rt_buf *)1;
        ck_assert_int_eq(net_tls_take_output(t, &none), 0);
        ck_assert_ptr_null(none);
        uint8_t back[17];
        client_read(&c, back, sizeof(back));
        ck_assert(memcmp(back, "HTTP/1.1 200 OK\r\n", 17) == 0);
        net_tls_free(t);
        client_free(&c);
    }
    net_tls_config_free(cfg);
}
END_TEST

START_TEST(test_every_suite)
{
    /* with an EC certificate: the ECDSA suites, each alone */
    static const int one[][2] = {
        {MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, 0},
        {MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, 0},
        {MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, 0},
    };
    net_tls_config *cfg = config(ec_crt, ec_key);
    for (size_t i = 0; i < sizeof(one) / sizeof(one[0]); i++) {
        client c;
        ck_assert_int_eq(client_init(&c, ec_crt, 3, 3, one[i]), 0);
        net_tls *t = net_tls_new(cfg);
        ck_assert_int_eq(handshake(t, &c, 0), 0);
        ck_assert_str_eq(mbedtls_ssl_get_ciphersuite(&c.ssl),
                         mbedtls_ssl_get_ciphersuite_name(one[i][0]));
        ck_assert_int_eq(net_tls_write(t, (const uint8_t *)"x", 1), 0);
        ck_assert_int_eq(deliver(t, &c), 0);
        uint8_t x;
        client_read(&c, &x, 1);
        ck_assert_int_eq(x, 'x');
        net_tls_free(t);
        client_free(&c);
    }
    net_tls_config_free(cfg);
}
END_TEST

START_TEST(test_rsa)
{
    char crt[512], key[512];
    make_cert("rsa", true, crt, key, sizeof(crt));
    net_tls_config *cfg = config(crt, key);
    net_tls *t;
    client c;
    connect_ok(cfg, crt, &t, &c, 0);
    ck_assert_str_eq(mbedtls_ssl_get_ciphersuite(&c.ssl), "TLS-ECDHE-RSA-WITH-AES-128-GCM-SHA256");
    net_tls_free(t);
    client_free(&c);

    /* CBC, and static RSA key exchange (no forward secrecy): refused */
    static const int cbc[] = {MBEDTLS_TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256, 0};
    static const int static_rsa[] = {MBEDTLS_TLS_RSA_WITH_AES_128_GCM_SHA256, 0};
    const int *refused[] = {cbc, static_rsa};
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(client_init(&c, crt, 3, 3, refused[i]), 0);
        t = net_tls_new(cfg);
        ck_assert_int_eq(handshake(t, &c, 0), NET_TLS_EPROTO);
        ck_assert_msg(strstr(net_tls_error(t), "no ciphersuites in common") != NULL, "%s",
                      net_tls_error(t));
        ck_assert_int_lt(mbedtls_ssl_handshake(&c.ssl), 0); /* the client got the alert */
        net_tls_free(t);
        client_free(&c);
    }
    net_tls_config_free(cfg);
}
END_TEST

START_TEST(test_non_aead_refused)
{
    static const int cbc[] = {MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256,
                              MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA,
                              MBEDTLS_TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256, 0};
    net_tls_config *cfg = config(ec_crt, ec_key);
    client c;
    ck_assert_int_eq(client_init(&c, ec_crt, 3, 3, cbc), 0);
    net_tls *t = net_tls_new(cfg);
    ck_assert_int_eq(handshake(t, &c, 0), NET_TLS_EPROTO);
    ck_assert(!net_tls_handshake_done(t));
    ck_assert_str_eq(net_tls_error(t),
                     "TLS handshake failed: The server has no ciphersuites in common with the "
                     "client");
    int r = mbedtls_ssl_handshake(&c.ssl);
    ck_assert_int_eq(r, MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE);
    /* sticky */
    ck_assert_int_eq(net_tls_read(t, NULL, 0), NET_TLS_EPROTO);
    ck_assert_int_eq(net_tls_input(t, (const uint8_t *)"x", 1), NET_TLS_EPROTO);
    ck_assert_int_eq(net_tls_write(t, (const uint8_t *)"x", 1), NET_TLS_EPROTO);
    net_tls_free(t);
    client_free(&c);
    net_tls_config_free(cfg);
}
END_TEST

START_TEST(test_old_versions_refused)
{
    net_tls_config *cfg = config(ec_crt, ec_key);
    for (int minor = MBEDTLS_SSL_MINOR_VERSION_1; minor <= MBEDTLS_SSL_MINOR_VERSION_2; minor++) {
        client c;
        ck_assert_int_eq(client_init(&c, ec_crt, minor, minor, NULL), 0);
        net_tls *t = net_tls_new(cfg);
        ck_assert_int_eq(handshake(t, &c, 0), NET_TLS_EPROTO);
        ck_assert_msg(strstr(net_tls_error(t), "protocol") != NULL, "%s", net_tls_error(t));
        /* a fatal protocol_version alert, in a record of the client's version */
        const uint8_t alert[] = {0x15, 0x03, (uint8_t)minor, 0x00, 0x02, 0x02, 0x46};
        ck_assert_uint_eq(c.to_client.len, sizeof(alert));
        ck_assert(memcmp(c.to_client.p, alert, sizeof(alert)) == 0);
        ck_assert_int_eq(mbedtls_ssl_handshake(&c.ssl), MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE);
        net_tls_free(t);
        client_free(&c);
    }
    /* a client that also offers 1.2 gets it */
    client c;
    ck_assert_int_eq(client_init(&c, ec_crt, MBEDTLS_SSL_MINOR_VERSION_1, 3, NULL), 0);
    net_tls *t = net_tls_new(cfg);
    ck_assert_int_eq(handshake(t, &c, 0), 0);
    ck_assert_str_eq(mbedtls_ssl_get_version(&c.ssl), "TLSv1.2");
    net_tls_free(t);
    client_free(&c);
    net_tls_config_free(cfg);
}
END_TEST

static uint8_t pattern(size_t i)
{
    return (uint8_t)(i * 131 + (i >> 12));
}

START_TEST(test_one_mib_both_ways)
{
    enum { MIB = 1 << 20 };
    uint8_t *big = malloc(MIB), *back = malloc(MIB);
    for (size_t i = 0; i < MIB; i++)
        big[i] = pattern(i);
    net_tls_config *cfg = config(ec_crt, ec_key);
    net_tls *t;
    client c;
    connect_ok(cfg, ec_crt, &t, &c, 0);

    /* client to server: 64 records, fed in odd pieces, read 5000 bytes at a time */
    client_write(&c, big, MIB);
    bytes got = {0};
    ck_assert_int_eq(feed(t, &c, 7001, &got), 0);
    ck_assert_uint_eq(got.len, MIB);
    ck_assert(memcmp(got.p, big, MIB) == 0);
    free(got.p);

    /* server to client: one write, one buffer of at least 64 records */
    ck_assert_int_eq(net_tls_write(t, big, MIB), 0);
    rt_buf *b;
    ck_assert_int_eq(net_tls_take_output(t, &b), 0);
    ck_assert_uint_ge(rt_buf_len(b), MIB + 64 * (5 + 8 + 16));
    bytes_add(&c.to_client, rt_buf_data(b), rt_buf_len(b));
    rt_buf_unref(b);
    client_read(&c, back, MIB);
    ck_assert(memcmp(back, big, MIB) == 0);

    net_tls_free(t);
    client_free(&c);
    net_tls_config_free(cfg);
    free(big);
    free(back);
}
END_TEST

START_TEST(test_close_notify)
{
    net_tls_config *cfg = config(ec_crt, ec_key);
    net_tls *t;
    client c;
    /* the peer closes: its data before the alert comes first */
    connect_ok(cfg, ec_crt, &t, &c, 0);
    client_write(&c, (const uint8_t *)"bye", 3);
    ck_assert_int_eq(mbedtls_ssl_close_notify(&c.ssl), 0);
    bytes got = {0};
    ck_assert_int_eq(feed(t, &c, 0, &got), NET_TLS_CLOSED);
    ck_assert_uint_eq(got.len, 3);
    free(got.p);
    ck_assert_int_eq(net_tls_read(t, NULL, 0), NET_TLS_CLOSED);
    ck_assert_int_eq(net_tls_close(t), 0); /* the answer */
    ck_assert_int_eq(deliver(t, &c), 0);
    uint8_t x;
    ck_assert_int_eq(mbedtls_ssl_read(&c.ssl, &x, 1), MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY);
    net_tls_free(t);
    client_free(&c);

    /* the server closes: writes are refused after */
    connect_ok(cfg, ec_crt, &t, &c, 0);
    ck_assert_int_eq(net_tls_write(t, (const uint8_t *)"last", 4), 0);
    ck_assert_int_eq(net_tls_close(t), 0);
    ck_assert_int_eq(net_tls_close(t), 0);
    ck_assert_int_eq(net_tls_write(t, (const uint8_t *)"more", 4), NET_TLS_ESTATE);
    ck_assert_int_eq(deliver(t, &c), 0);
    uint8_t last[4];
    client_read(&c, last, 4);
    ck_assert(memcmp(last, "last", 4) == 0);
    ck_assert_int_eq(mbedtls_ssl_read(&c.ssl, &x, 1), MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY);
    net_tls_free(t);
    client_free(&c);

    /* before the handshake: nothing to send, nothing to write */
    t = net_tls_new(cfg);
    ck_assert_int_eq(net_tls_write(t, (const uint8_t *)"x", 1), NET_TLS_ESTATE);
    ck_assert_int_eq(net_tls_close(t), 0);
    ck_assert_uint_eq(net_tls_pending_output(t), 0);
    net_tls_free(t);
    net_tls_config_free(cfg);
}
END_TEST

/* Feed data to a fresh engine and read until it wants more or fails. */
static ssize_t garbage(net_tls_config *cfg, const uint8_t *p, size_t n, char *why, size_t cap)
{
    net_tls *t = net_tls_new(cfg);
    ck_assert_ptr_nonnull(t);
    uint8_t out[256];
    ssize_t r = net_tls_input(t, p, n);
    if (r == 0)
        r = net_tls_read(t, out, sizeof(out));
    if (why != NULL)
        snprintf(why, cap, "%s", net_tls_error(t));
    net_tls_free(t);
    return r;
}

START_TEST(test_garbage)
{
    net_tls_config *cfg = config(ec_crt, ec_key);
    char why[256];
    const char *http = "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
    ck_assert_int_eq(garbage(cfg, (const uint8_t *)http, strlen(http), why, sizeof(why)),
                     NET_TLS_EPROTO);
    ck_assert_msg(strncmp(why, "TLS handshake failed: ", 22) == 0, "%s", why);

    /* random bytes, and random handshake records claiming to be a ClientHello */
    uint32_t seed = 12345;
    uint8_t p[600];
    for (int i = 0; i < TS_SCALE(2000, 300); i++) {
        size_t n = 1 + (size_t)i % sizeof(p);
        for (size_t k = 0; k < n; k++) {
            seed = seed * 1103515245u + 12345u;
            p[k] = (uint8_t)(seed >> 16);
        }
        ssize_t r = garbage(cfg, p, n, NULL, 0);
        ts_require(r <= 0 && r != NET_TLS_CLOSED, "random %d: %zd", i, r);
        if (n < 10)
            continue;
        size_t body = n - 5;
        uint8_t hdr[] = {0x16, 0x03, 0x03, (uint8_t)(body >> 8), (uint8_t)body, 0x01};
        memcpy(p, hdr, sizeof(hdr));
        r = garbage(cfg, p, n, NULL, 0);
        ts_require(r == NET_TLS_EPROTO, "client hello %d: %zd", i, r);
    }
    /* a record longer than TLS allows */
    static const uint8_t huge[] = {0x16, 0x03, 0x03, 0xff, 0xff};
    ck_assert_int_eq(garbage(cfg, huge, sizeof(huge), NULL, 0), NET_TLS_EPROTO);

    /* after the handshake: a forged record, then a short one */
    for (int len = 0x30; len >= 4; len -= 0x2c) {
        net_tls *t;
        client c;
        connect_ok(cfg, ec_crt, &t, &c, 0);
        uint8_t rec[5 + 0x30] = {0x17, 0x03, 0x03, 0x00, (uint8_t)len};
        memset(rec + 5, 0xa5, sizeof(rec) - 5);
        ck_assert_int_eq(net_tls_input(t, rec, 5 + (size_t)len), 0);
        uint8_t out[64];
        ck_assert_int_eq(net_tls_read(t, out, sizeof(out)), NET_TLS_EPROTO);
        ck_assert_msg(strncmp(net_tls_error(t), "TLS read failed: ", 17) == 0, "%s",
                      net_tls_error(t));
        ck_assert_int_eq(net_tls_write(t, (const uint8_t *)"x", 1), NET_TLS_EPROTO);
        net_tls_free(t);
        client_free(&c);
    }
    net_tls_config_free(cfg);
}
END_TEST

START_TEST(test_input_bound)
{
    net_tls_config *cfg = config(ec_crt, ec_key);
    net_tls *t;
    client c;
    connect_ok(cfg, ec_crt, &t, &c, 0);
    static uint8_t chunk[16 << 10];
    for (size_t at = 0; at < NET_TLS_INPUT_MAX; at += sizeof(chunk))
        ck_assert_int_eq(net_tls_input(t, chunk, sizeof(chunk)), 0);
    ck_assert_int_eq(net_tls_input(t, chunk, 1), NET_TLS_EFULL);
    ck_assert_msg(strstr(net_tls_error(t), "128 KiB") != NULL, "%s", net_tls_error(t));
    ck_assert_int_eq(net_tls_read(t, chunk, sizeof(chunk)), NET_TLS_EFULL);
    net_tls_free(t);
    client_free(&c);

    /* what has been read does not count */
    connect_ok(cfg, ec_crt, &t, &c, 0);
    uint8_t *big = calloc(1, 3 * NET_TLS_INPUT_MAX);
    client_write(&c, big, 3 * NET_TLS_INPUT_MAX);
    bytes got = {0};
    ck_assert_int_eq(feed(t, &c, 60000, &got), 0);
    ck_assert_uint_eq(got.len, 3 * NET_TLS_INPUT_MAX);
    free(got.p);
    free(big);
    net_tls_free(t);
    client_free(&c);
    net_tls_config_free(cfg);
}
END_TEST

static void config_fails(const char *crt, const char *key, const char *expect)
{
    char err[512] = "";
    net_tls_config *c = (net_tls_config *)1;
    ck_assert_int_lt(net_tls_config_new(crt, key, &c, err, sizeof(err)), 0);
    ck_assert_ptr_null(c);
    ck_assert_msg(strstr(err, expect) != NULL, "\"%s\" does not say \"%s\"", err, expect);
    ck_assert_ptr_null(strchr(err, '\n'));
}

START_TEST(test_config_errors)
{
    char missing[600], text[600], other_crt[512], other_key[512], cut[600], buf[2048];
    snprintf(missing, sizeof(missing), "%s/missing.pem", dir);
    snprintf(buf, sizeof(buf), "cannot open the TLS certificate %s: No such file or directory",
             missing);
    config_fails(missing, ec_key, buf);
    snprintf(buf, sizeof(buf), "cannot open the TLS key %s: No such file or directory", missing);
    config_fails(ec_crt, missing, buf);

    snprintf(text, sizeof(text), "%s/text.pem", dir);
    write_file(text, "hello\n", 6);
    config_fails(text, ec_key, "not a PEM file");
    config_fails(ec_crt, text, "not a PEM file");
    config_fails(ec_key, ec_crt, "no certificate in");
    config_fails(ec_crt, ec_crt, "bad TLS key in");
    config_fails(dir, ec_key, "cannot read the TLS certificate"); /* a directory */

    /* a certificate cut short */
    FILE *f = fopen(ec_crt, "rb");
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    snprintf(cut, sizeof(cut), "%s/cut.pem", dir);
    write_file(cut, buf, n / 2);
    config_fails(cut, ec_key, "bad TLS certificate in");

    /* another key */
    make_cert("other", false, other_crt, other_key, sizeof(other_crt));
    snprintf(buf, sizeof(buf), "the TLS key in %s does not match the certificate in %s", other_key,
             ec_crt);
    config_fails(ec_crt, other_key, buf);
    config_fails(NULL, ec_key, "both needed");
    net_tls_config_free(config(other_crt, other_key));
}
END_TEST

typedef struct worker {
    net_tls_config *cfg;
    int rounds;
} worker;

static void *handshakes(void *arg)
{
    worker *w = arg;
    for (int i = 0; i < w->rounds; i++) {
        client c;
        TS_CHECK(client_init(&c, ec_crt, 3, 3, NULL) == 0);
        net_tls *t = net_tls_new(w->cfg);
        TS_CHECK(t != NULL);
        TS_CHECK(handshake(t, &c, 0) == 0);
        TS_CHECK(net_tls_write(t, (const uint8_t *)"ok", 2) == 0);
        TS_CHECK(deliver(t, &c) == 0);
        uint8_t ok[2];
        TS_CHECK(mbedtls_ssl_read(&c.ssl, ok, 2) == 2 && memcmp(ok, "ok", 2) == 0);
        net_tls_free(t);
        client_free(&c);
    }
    return NULL;
}

START_TEST(test_shared_config)
{
    /* a config never used yet: the first signatures race for the key's tables */
    net_tls_config *cfg = config(ec_crt, ec_key);
    enum { N = 4 };
    pthread_t th[N];
    worker w = {cfg, TS_SCALE(8, 3)};
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, handshakes, &w), 0);
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    ts_assert_clean();
    net_tls_config_free(cfg);
}
END_TEST

START_TEST(test_bad_arguments)
{
    ck_assert_ptr_null(net_tls_new(NULL));
    ck_assert_int_eq(net_tls_input(NULL, NULL, 0), NET_TLS_EINVAL);
    ck_assert_int_eq(net_tls_read(NULL, NULL, 0), NET_TLS_EINVAL);
    net_tls_config *cfg = config(ec_crt, ec_key);
    net_tls *t = net_tls_new(cfg);
    ck_assert_int_eq(net_tls_input(t, NULL, 1), NET_TLS_EINVAL);
    ck_assert_int_eq(net_tls_input(t, NULL, 0), 0);
    ck_assert_int_eq(net_tls_read(t, NULL, 1), NET_TLS_EINVAL);
    ck_assert_int_eq(net_tls_read(t, NULL, 0), 0); /* waiting for a ClientHello */
    ck_assert_int_eq(net_tls_take_output(t, NULL), NET_TLS_EINVAL);
    ck_assert(!net_tls_handshake_done(t));
    net_tls_free(t);
    net_tls_free(NULL);
    net_tls_config_free(cfg);
    net_tls_config_free(NULL);
}
END_TEST

/* rt_strerror describes our codes: tls.c registered them at start-up. */
START_TEST(test_codes_described)
{
    const int codes[] = {NET_TLS_CLOSED, NET_TLS_EPROTO, NET_TLS_EFULL,
                         NET_TLS_ESTATE, NET_TLS_ENOMEM, NET_TLS_EINVAL};
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        ck_assert_str_ne(rt_strerror(codes[i]), "unknown error");
    ck_assert_str_eq(rt_strerror(NET_TLS_EPROTO), "TLS handshake or record refused");
    ck_assert_str_eq(rt_strerror(-2999), "unknown error"); /* ours, but no code */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tls");
    TCase *tc = tcase_create("server");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_handshake_and_echo);
    tcase_add_test(tc, test_every_suite);
    tcase_add_test(tc, test_rsa);
    tcase_add_test(tc, test_non_aead_refused);
    tcase_add_test(tc, test_old_versions_refused);
    tcase_add_test(tc, test_one_mib_both_ways);
    tcase_add_test(tc, test_close_notify);
    tcase_add_test(tc, test_garbage);
    tcase_add_test(tc, test_input_bound);
    tcase_add_test(tc, test_config_errors);
    tcase_add_test(tc, test_shared_config);
    tcase_add_test(tc, test_bad_arguments);
    tcase_add_test(tc, test_codes_described);
    suite_add_tcase(s, tc);
    return ts_run_suite(s);
}
