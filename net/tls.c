/*
 * tls.c - TLS 1.2 server engine on mbedTLS 2.28 over memory buffers. See
 * tls.h.
 *
 * mbedTLS reads and writes through callbacks (mbedtls_ssl_set_bio): here
 * they read from the bytes given to net_tls_input (WANT_READ when none are
 * left) and append to an output buffer that always takes everything, so
 * mbedTLS never has to retry a write and net_tls_write queues all it is
 * given. The output buffer is handed over whole by net_tls_take_output,
 * wrapped in an rt_buf, so the connection can uv_write it without a copy.
 *
 * One net_tls_config serves every connection on every thread. mbedTLS
 * only reads the ssl config, certificate and key during handshakes, with
 * two exceptions handled here:
 *  - the random generator: the one ctr_drbg is shared, which is safe
 *    because Debian builds mbedTLS with MBEDTLS_THREADING_C and
 *    MBEDTLS_THREADING_PTHREAD (/usr/include/mbedtls/config.h), and with
 *    those mbedtls_ctr_drbg_random holds the context's mutex for each call
 *    (as does mbedtls_rsa_private for an RSA key's blinding values);
 *  - an EC key: the first signature with it stores the generator's
 *    precomputed table in the key's group (grp->T, ecp_mul_comb), a write
 *    with no lock. Signing once while loading the key, before the config
 *    is shared, leaves later handshakes only reading that table.
 */
#include "net/tls.h"
#include "runtime/err.h"
#include "runtime/grow.h"

#include <mbedtls/asn1.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/pk.h>
#include <mbedtls/platform_util.h>
#include <mbedtls/sha256.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if !defined(MBEDTLS_THREADING_C) || !defined(MBEDTLS_THREADING_PTHREAD)
#error "net_tls_config is shared between threads: mbedTLS must be built with MBEDTLS_THREADING_C"
#endif

enum { PEM_FILE_MAX = 1 << 20, IN_FIRST = 4096 };

/* Server's order of preference (mbedTLS picks by the server's order). */
static const int suites[] = {
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    MBEDTLS_TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    MBEDTLS_TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    MBEDTLS_TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    0,
};

/* ECDHE groups: the default list also has the small and the Brainpool curves. */
static const mbedtls_ecp_group_id curves[] = {
    MBEDTLS_ECP_DP_CURVE25519,
    MBEDTLS_ECP_DP_SECP256R1,
    MBEDTLS_ECP_DP_SECP384R1,
    MBEDTLS_ECP_DP_NONE,
};

struct net_tls_config {
    mbedtls_ssl_config conf;
    mbedtls_x509_crt chain;
    mbedtls_pk_context key;
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg;
    mbedtls_x509_crt ca; /* a client's trusted roots */
    bool client, verify;
};

struct net_tls {
    mbedtls_ssl_context ssl;
    uint8_t *in; /* [in_off, in_len) not read by mbedTLS yet */
    size_t in_off, in_len, in_cap;
    rt_outbox out; /* ciphertext to send */
    bool done;     /* handshake over */
    bool closing;  /* we sent close_notify */
    bool peer_closed;
    int err;
    char msg[200];
    uint8_t ip[16]; /* a client's server given by address: the SAN it must have */
    size_t iplen;
};

/* ---------------------------------------------------------------- errors --- */

/* rt_strerror's words for our codes, registered for the range runtime/err.h
 * gives us when the program starts (one that does not link this file never
 * gets these codes). */
static const char *tls_strerror(int err)
{
    switch (err) {
    case NET_TLS_CLOSED:
        return "TLS peer closed the connection (close_notify)";
    case NET_TLS_EPROTO:
        return "TLS handshake or record refused";
    case NET_TLS_EFULL:
        return "TLS input over its limit not read";
    case NET_TLS_ESTATE:
        return "TLS write before the handshake or after the close";
    case NET_TLS_ENOMEM:
        return "out of memory in TLS";
    case NET_TLS_EINVAL:
        return "invalid argument to TLS";
    }
    return NULL;
}

__attribute__((constructor)) static void tls_register_errors(void)
{
    rt_err_register(-2999, -2000, tls_strerror);
}

/* "SSL - The connection indicated an EOF" without the module prefix. */
static const char *describe(int ret, char *buf, size_t len)
{
    mbedtls_strerror(ret, buf, len);
    const char *s = strstr(buf, " - ");
    return s != NULL ? s + 3 : buf;
}

static int fail(net_tls *t, int code, const char *doing, int ret)
{
    if (t->err == 0) {
        char d[120];
        snprintf(t->msg, sizeof(t->msg), "TLS %s failed: %s", doing, describe(ret, d, sizeof(d)));
        t->err = code;
    }
    return t->err;
}

/* ---------------------------------------------------------------- config --- */

/* A whole PEM file, NUL-terminated (mbedTLS wants the NUL counted in the
 * length to recognize PEM). The caller zeroizes and frees it. */
static uint8_t *load(const char *what, const char *path, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        rt_say(err, errlen, "cannot open the TLS %s %s: %s", what, path, strerror(errno));
        return NULL;
    }
    uint8_t *b = malloc(PEM_FILE_MAX + 1);
    size_t n = b != NULL ? fread(b, 1, PEM_FILE_MAX + 1, f) : 0;
    int bad = b != NULL && ferror(f) ? errno : 0;
    fclose(f);
    if (b == NULL) {
        rt_say(err, errlen, "out of memory reading the TLS %s %s", what, path);
        return NULL;
    }
    const char *why = bad ? strerror(bad) : n > PEM_FILE_MAX ? "larger than 1 MiB" : NULL;
    if (why == NULL) {
        b[n] = 0;
        if (strlen((char *)b) != n || strstr((char *)b, "-----BEGIN ") == NULL)
            why = "not a PEM file (expected -----BEGIN ...-----)";
    }
    if (why != NULL) {
        rt_say(err, errlen, "cannot read the TLS %s %s: %s", what, path, why);
        mbedtls_platform_zeroize(b, n);
        free(b);
        return NULL;
    }
    *len = n + 1;
    return b;
}

static void unload(uint8_t *b, size_t len)
{
    if (b != NULL)
        mbedtls_platform_zeroize(b, len);
    free(b);
}

static int load_chain(net_tls_config *c, const char *path, char *err, size_t errlen)
{
    size_t len;
    uint8_t *b = load("certificate", path, &len, err, errlen);
    if (b == NULL)
        return NET_TLS_EINVAL;
    int r = NET_TLS_EINVAL;
    if (strstr((char *)b, "-----BEGIN CERTIFICATE-----") == NULL) {
        rt_say(err, errlen, "no certificate in %s (expected -----BEGIN CERTIFICATE-----)", path);
    } else {
        int ret = mbedtls_x509_crt_parse(&c->chain, b, len);
        char d[120];
        if (ret < 0)
            rt_say(err, errlen, "bad TLS certificate in %s: %s", path, describe(ret, d, sizeof(d)));
        else if (ret > 0)
            rt_say(err, errlen, "bad TLS certificate in %s: %d of its certificates do not parse",
                   path, ret);
        else
            r = 0;
    }
    unload(b, len);
    return r;
}

static int load_key(net_tls_config *c, const char *path, char *err, size_t errlen)
{
    size_t len;
    uint8_t *b = load("key", path, &len, err, errlen);
    if (b == NULL)
        return NET_TLS_EINVAL;
    int ret = mbedtls_pk_parse_key(&c->key, b, len, NULL, 0);
    unload(b, len);
    if (ret == 0)
        return 0;
    char d[120];
    if (ret == MBEDTLS_ERR_PK_PASSWORD_REQUIRED || ret == MBEDTLS_ERR_PK_PASSWORD_MISMATCH)
        rt_say(err, errlen, "the TLS key in %s is encrypted: give it unencrypted", path);
    else
        rt_say(err, errlen, "bad TLS key in %s: %s", path, describe(ret, d, sizeof(d)));
    return NET_TLS_EINVAL;
}

/* Sign once: checks that the key works and, for an EC key, fills the
 * group's table before other threads can see it (see the top). */
static int warm_up(net_tls_config *c, const char *key_file, char *err, size_t errlen)
{
    uint8_t hash[32], sig[MBEDTLS_PK_SIGNATURE_MAX_SIZE];
    size_t siglen;
    char d[120];
    int ret = mbedtls_sha256_ret((const uint8_t *)"parley", 6, hash, 0);
    if (ret == 0)
        ret = mbedtls_pk_sign(&c->key, MBEDTLS_MD_SHA256, hash, sizeof(hash), sig, &siglen,
                              mbedtls_ctr_drbg_random, &c->drbg);
    if (ret == 0)
        ret = mbedtls_pk_verify(&c->chain.pk, MBEDTLS_MD_SHA256, hash, sizeof(hash), sig, siglen);
    if (ret != 0) {
        rt_say(err, errlen, "cannot sign with the TLS key in %s: %s", key_file,
               describe(ret, d, sizeof(d)));
        return NET_TLS_EINVAL;
    }
    return 0;
}

/* The defaults for a side, then what both sides allow: TLS 1.2, the
 * suites and groups above, no renegotiation. */
static int setup_conf(net_tls_config *c, int endpoint, char *err, size_t errlen)
{
    char d[120];
    int ret = mbedtls_ssl_config_defaults(&c->conf, endpoint, MBEDTLS_SSL_TRANSPORT_STREAM,
                                          MBEDTLS_SSL_PRESET_DEFAULT);
    if (ret != 0) {
        rt_say(err, errlen, "cannot set up TLS: %s", describe(ret, d, sizeof(d)));
        return NET_TLS_EINVAL;
    }
    mbedtls_ssl_conf_min_version(&c->conf, MBEDTLS_SSL_MAJOR_VERSION_3,
                                 MBEDTLS_SSL_MINOR_VERSION_3);
    mbedtls_ssl_conf_max_version(&c->conf, MBEDTLS_SSL_MAJOR_VERSION_3,
                                 MBEDTLS_SSL_MINOR_VERSION_3);
    mbedtls_ssl_conf_ciphersuites(&c->conf, suites);
    mbedtls_ssl_conf_curves(&c->conf, curves);
    mbedtls_ssl_conf_renegotiation(&c->conf, MBEDTLS_SSL_RENEGOTIATION_DISABLED);
    mbedtls_ssl_conf_rng(&c->conf, mbedtls_ctr_drbg_random, &c->drbg);
    return 0;
}

static net_tls_config *config_alloc(void)
{
    net_tls_config *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    mbedtls_ssl_config_init(&c->conf);
    mbedtls_x509_crt_init(&c->chain);
    mbedtls_x509_crt_init(&c->ca);
    mbedtls_pk_init(&c->key);
    mbedtls_entropy_init(&c->entropy);
    mbedtls_ctr_drbg_init(&c->drbg);
    return c;
}

static int seed(net_tls_config *c, char *err, size_t errlen)
{
    static const char pers[] = "parley tls";
    char d[120];
    int ret = mbedtls_ctr_drbg_seed(&c->drbg, mbedtls_entropy_func, &c->entropy,
                                    (const unsigned char *)pers, sizeof(pers) - 1);
    if (ret == 0)
        return 0;
    rt_say(err, errlen, "cannot seed the TLS random generator: %s", describe(ret, d, sizeof(d)));
    return NET_TLS_EINVAL;
}

int net_tls_config_new(const char *cert_file, const char *key_file, net_tls_config **out, char *err,
                       size_t errlen)
{
    if (out != NULL)
        *out = NULL;
    if (cert_file == NULL || key_file == NULL || out == NULL) {
        rt_say(err, errlen, "a TLS certificate file and key file are both needed");
        return NET_TLS_EINVAL;
    }
    net_tls_config *c = config_alloc();
    if (c == NULL) {
        rt_say(err, errlen, "out of memory loading the TLS certificate");
        return NET_TLS_ENOMEM;
    }

    char d[120];
    int r = load_chain(c, cert_file, err, errlen);
    if (r == 0)
        r = load_key(c, key_file, err, errlen);
    if (r == 0 && mbedtls_pk_check_pair(&c->chain.pk, &c->key) != 0) {
        rt_say(err, errlen, "the TLS key in %s does not match the certificate in %s", key_file,
               cert_file);
        r = NET_TLS_EINVAL;
    }
    if (r == 0 && !mbedtls_pk_can_do(&c->key, MBEDTLS_PK_ECDSA) &&
        !mbedtls_pk_can_do(&c->key, MBEDTLS_PK_RSA)) {
        rt_say(err, errlen, "the TLS key in %s is neither EC nor RSA", key_file);
        r = NET_TLS_EINVAL;
    }
    int ret = 0;
    if (r == 0)
        r = seed(c, err, errlen);
    if (r == 0)
        r = warm_up(c, key_file, err, errlen);
    if (r == 0)
        r = setup_conf(c, MBEDTLS_SSL_IS_SERVER, err, errlen);
    if (r == 0 && (ret = mbedtls_ssl_conf_own_cert(&c->conf, &c->chain, &c->key)) != 0) {
        rt_say(err, errlen, "cannot set up TLS: %s", describe(ret, d, sizeof(d)));
        r = NET_TLS_EINVAL;
    }
    if (r != 0) {
        net_tls_config_free(c);
        return r;
    }
    *out = c;
    return 0;
}

void net_tls_config_free(net_tls_config *c)
{
    if (c == NULL)
        return;
    mbedtls_ssl_config_free(&c->conf);
    mbedtls_x509_crt_free(&c->chain);
    mbedtls_x509_crt_free(&c->ca);
    mbedtls_pk_free(&c->key);
    mbedtls_ctr_drbg_free(&c->drbg);
    mbedtls_entropy_free(&c->entropy);
    free(c);
}

/* ------------------------------------------------------------ client ------- */

int net_tls_client_config_new(const char *ca_file, bool verify, net_tls_config **out, char *err,
                              size_t errlen)
{
    if (out == NULL)
        return NET_TLS_EINVAL;
    *out = NULL;
    net_tls_config *c = config_alloc();
    if (c == NULL) {
        rt_say(err, errlen, "out of memory setting up TLS");
        return NET_TLS_ENOMEM;
    }
    c->client = true;
    c->verify = verify;
    char d[120];
    int r = seed(c, err, errlen);
    if (r == 0 && verify) {
        const char *path = ca_file != NULL ? ca_file : NET_TLS_SYSTEM_CA;
        /* A bundle may hold a few certificates mbedTLS cannot parse (> 0):
         * the others still serve; none at all is an error. */
        int ret = mbedtls_x509_crt_parse_file(&c->ca, path);
        if (ret < 0 || c->ca.version == 0) {
            rt_say(err, errlen, "cannot read the CA certificates in %s: %s", path,
                   ret < 0 ? describe(ret, d, sizeof(d)) : "none parses");
            r = NET_TLS_EINVAL;
        }
    }
    if (r == 0)
        r = setup_conf(c, MBEDTLS_SSL_IS_CLIENT, err, errlen);
    if (r != 0) {
        net_tls_config_free(c);
        return r;
    }
    mbedtls_ssl_conf_authmode(&c->conf,
                              verify ? MBEDTLS_SSL_VERIFY_REQUIRED : MBEDTLS_SSL_VERIFY_NONE);
    if (verify)
        mbedtls_ssl_conf_ca_chain(&c->conf, &c->ca, NULL);
    *out = c;
    return 0;
}

/* Does the certificate's subjectAltName list the address ip? mbedTLS 2.28
 * checks only DNS names, so a server reached by address is checked here:
 * v3_ext is the inside of [3]: SEQUENCE OF Extension { OID, BOOLEAN?,
 * OCTET STRING }, and the SAN's octets are a SEQUENCE OF GeneralName, iPAddress being [7]. */
static bool san_has_ip(const mbedtls_x509_crt *crt, const uint8_t *ip, size_t iplen)
{
    static const uint8_t san_oid[] = {0x55, 0x1d, 0x11}; /* 2.5.29.17 */
    uint8_t *p = crt->v3_ext.p, *end = p + crt->v3_ext.len;
    size_t len;
    if (p == NULL ||
        mbedtls_asn1_get_tag(&p, end, &len, MBEDTLS_ASN1_CONSTRUCTED | MBEDTLS_ASN1_SEQUENCE) != 0)
        return false;
    end = p + len;
    while (p < end) {
        uint8_t *ext_end;
        size_t olen;
        if (mbedtls_asn1_get_tag(&p, end, &len, MBEDTLS_ASN1_CONSTRUCTED | MBEDTLS_ASN1_SEQUENCE) !=
            0)
            return false;
        ext_end = p + len;
        if (mbedtls_asn1_get_tag(&p, ext_end, &olen, MBEDTLS_ASN1_OID) != 0)
            return false;
        bool san = olen == sizeof(san_oid) && memcmp(p, san_oid, olen) == 0;
        p += olen;
        int crit;
        (void)mbedtls_asn1_get_bool(&p, ext_end, &crit); /* optional */
        if (san && mbedtls_asn1_get_tag(&p, ext_end, &len, MBEDTLS_ASN1_OCTET_STRING) == 0 &&
            mbedtls_asn1_get_tag(&p, ext_end, &len,
                                 MBEDTLS_ASN1_CONSTRUCTED | MBEDTLS_ASN1_SEQUENCE) == 0) {
            uint8_t *names_end = p + len;
            while (p < names_end) {
                int tag = *p++;
                if (mbedtls_asn1_get_len(&p, names_end, &len) != 0)
                    return false;
                if (tag == (MBEDTLS_ASN1_CONTEXT_SPECIFIC | 7) && len == iplen &&
                    memcmp(p, ip, len) == 0)
                    return true;
                p += len;
            }
            return false;
        }
        p = ext_end;
    }
    return false;
}

static int verify_ip(void *ctx, mbedtls_x509_crt *crt, int depth, uint32_t *flags)
{
    const net_tls *t = ctx;
    if (depth == 0 && !san_has_ip(crt, t->ip, t->iplen))
        *flags |= MBEDTLS_X509_BADCERT_CN_MISMATCH;
    return 0;
}

/* ------------------------------------------------------------ connection --- */

static int bio_send(void *ctx, const unsigned char *buf, size_t len)
{
    net_tls *t = ctx;
    uint8_t *at = rt_outbox_reserve(&t->out, len);
    if (at == NULL)
        return MBEDTLS_ERR_SSL_ALLOC_FAILED;
    memcpy(at, buf, len);
    return (int)len;
}

static int bio_recv(void *ctx, unsigned char *buf, size_t len)
{
    net_tls *t = ctx;
    size_t n = t->in_len - t->in_off;
    if (n == 0)
        return MBEDTLS_ERR_SSL_WANT_READ;
    if (n > len)
        n = len;
    memcpy(buf, t->in + t->in_off, n);
    t->in_off += n;
    return (int)n;
}

net_tls *net_tls_new(net_tls_config *c)
{
    if (c == NULL)
        return NULL;
    net_tls *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    mbedtls_ssl_init(&t->ssl);
    if (mbedtls_ssl_setup(&t->ssl, &c->conf) != 0) {
        mbedtls_ssl_free(&t->ssl);
        free(t);
        return NULL;
    }
    mbedtls_ssl_set_bio(&t->ssl, t, bio_send, bio_recv, NULL);
    return t;
}

net_tls *net_tls_new_client(net_tls_config *c, const char *host)
{
    if (c == NULL || !c->client || host == NULL)
        return NULL;
    net_tls *t = net_tls_new(c);
    if (t == NULL)
        return NULL;
    int ret = 0;
    if (inet_pton(AF_INET, host, t->ip) == 1)
        t->iplen = 4;
    else if (inet_pton(AF_INET6, host, t->ip) == 1)
        t->iplen = 16;
    else
        ret = mbedtls_ssl_set_hostname(&t->ssl, host); /* SNI, and the name checked */
    if (t->iplen > 0 && c->verify)
        mbedtls_ssl_set_verify(&t->ssl, verify_ip, t);
    if (ret != 0) {
        net_tls_free(t);
        return NULL;
    }
    return t;
}

void net_tls_free(net_tls *t)
{
    if (t == NULL)
        return;
    mbedtls_ssl_free(&t->ssl);
    free(t->in);
    rt_outbox_free(&t->out);
    free(t);
}

int net_tls_input(net_tls *t, const uint8_t *data, size_t len)
{
    if (t == NULL || (data == NULL && len > 0))
        return NET_TLS_EINVAL;
    if (t->err != 0)
        return t->err;
    if (t->in_off > 0) { /* what mbedTLS has read is gone: keep the rest at the front */
        memmove(t->in, t->in + t->in_off, t->in_len - t->in_off);
        t->in_len -= t->in_off;
        t->in_off = 0;
    }
    if (len > NET_TLS_INPUT_MAX - t->in_len) {
        snprintf(t->msg, sizeof(t->msg), "TLS input over %u KiB not read", NET_TLS_INPUT_MAX >> 10);
        return t->err = NET_TLS_EFULL;
    }
    if (rt_grow((void **)&t->in, &t->in_cap, t->in_len + len, 1, IN_FIRST) != 0)
        return NET_TLS_ENOMEM;
    if (len > 0)
        memcpy(t->in + t->in_len, data, len);
    t->in_len += len;
    return 0;
}

ssize_t net_tls_read(net_tls *t, uint8_t *out, size_t cap)
{
    if (t == NULL || (out == NULL && cap > 0))
        return NET_TLS_EINVAL;
    if (t->err != 0)
        return t->err;
    if (t->peer_closed)
        return NET_TLS_CLOSED;
    if (!t->done) {
        int ret = mbedtls_ssl_handshake(&t->ssl);
        if (ret == MBEDTLS_ERR_SSL_WANT_READ)
            return 0;
        if (ret == MBEDTLS_ERR_X509_CERT_VERIFY_FAILED && t->err == 0) {
            char info[160];
            mbedtls_x509_crt_verify_info(info, sizeof(info), "",
                                         mbedtls_ssl_get_verify_result(&t->ssl));
            info[strcspn(info, "\n")] = 0;
            snprintf(t->msg, sizeof(t->msg), "TLS certificate verification failed: %s", info);
            t->err = NET_TLS_EPROTO;
        }
        if (ret != 0)
            return fail(t, ret == MBEDTLS_ERR_SSL_ALLOC_FAILED ? NET_TLS_ENOMEM : NET_TLS_EPROTO,
                        "handshake", ret);
        t->done = true;
    }
    if (cap == 0)
        return 0;
    /* mbedtls_ssl_read returns at most one record's bytes, and never 0 for
     * data: 0 would mean the transport's EOF, which bio_recv never gives. */
    int ret = mbedtls_ssl_read(&t->ssl, out, cap > INT32_MAX ? INT32_MAX : cap);
    if (ret > 0)
        return ret;
    if (ret == 0 || ret == MBEDTLS_ERR_SSL_WANT_READ)
        return 0;
    if (ret == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY) {
        t->peer_closed = true;
        return NET_TLS_CLOSED;
    }
    return fail(t, ret == MBEDTLS_ERR_SSL_ALLOC_FAILED ? NET_TLS_ENOMEM : NET_TLS_EPROTO, "read",
                ret);
}

int net_tls_write(net_tls *t, const uint8_t *data, size_t len)
{
    if (t == NULL || (data == NULL && len > 0))
        return NET_TLS_EINVAL;
    if (t->err != 0)
        return t->err;
    if (!t->done || t->closing)
        return NET_TLS_ESTATE;
    size_t at = 0;
    while (at < len) {
        /* one record at most per call; bio_send takes it all, so no WANT_WRITE */
        int ret = mbedtls_ssl_write(&t->ssl, data + at, len - at);
        if (ret <= 0)
            return fail(t, ret == MBEDTLS_ERR_SSL_ALLOC_FAILED ? NET_TLS_ENOMEM : NET_TLS_EPROTO,
                        "write", ret);
        at += (size_t)ret;
    }
    return 0;
}

int net_tls_close(net_tls *t)
{
    if (t == NULL)
        return NET_TLS_EINVAL;
    if (t->err != 0)
        return t->err;
    if (t->closing)
        return 0;
    t->closing = true;
    /* Before the handshake is over mbedTLS sends nothing: the connection just closes. */
    int ret = mbedtls_ssl_close_notify(&t->ssl);
    if (ret != 0)
        return fail(t, ret == MBEDTLS_ERR_SSL_ALLOC_FAILED ? NET_TLS_ENOMEM : NET_TLS_EPROTO,
                    "close", ret);
    return 0;
}

int net_tls_take_output(net_tls *t, rt_buf **out)
{
    if (t == NULL || out == NULL)
        return NET_TLS_EINVAL;
    return rt_outbox_take(&t->out, out) == 0 ? 0 : NET_TLS_ENOMEM;
}

size_t net_tls_pending_output(const net_tls *t)
{
    return t != NULL ? t->out.len : 0;
}

bool net_tls_handshake_done(const net_tls *t)
{
    return t != NULL && t->done;
}

bool net_tls_idle(const net_tls *t)
{
    return t != NULL && t->done && t->err == 0 && !t->closing && !t->peer_closed &&
           t->in_off == t->in_len && t->out.len == 0 && mbedtls_ssl_get_bytes_avail(&t->ssl) == 0 &&
           mbedtls_ssl_check_pending(&t->ssl) == 0;
}

const char *net_tls_error(const net_tls *t)
{
    return t != NULL ? t->msg : "";
}
