/*
 * fore_echo.c: an echo client and server written to the FORE ATM API of seed 002
 * (Subramanyan, "Protocol Overhead in ATM networks", section 3.1: atm_open,
 * atm_bind, atm_connect, atm_listen, atm_accept, atm_send/atm_recv of one PDU
 * each, atm_close), compiled against natm_fore.h and run by tests/capi.rs.
 *
 *   fore_echo server DEVICE SAP       echo on SAP, then take a simplex call there;
 *                                     SAP+1 rejects every call;
 *                                     SAP+2 takes two multicast parties
 *   fore_echo client DEVICE ADDR SAP  N PDUs of several sizes echoed and checked,
 *                                     a simplex call, the refusals and a
 *                                     multicast call
 *
 * DEVICE is the sigd socket ("/dev/fa0" would mean the default one). Every check
 * prints a line; the last is "all checks passed". Exit 1 on the first failure.
 */
#define _POSIX_C_SOURCE 199309L /* clock_gettime under -std=c99 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "natm_fore.h"

#define ROUNDS 4
static const int sizes[] = {1, 48, 100, 1024, 2048, 4092, 8000, 9188};
#define NSIZES ((int)(sizeof sizes / sizeof sizes[0]))

static char buf[16384];

/* Milliseconds on the monotonic clock, for the server to say how long a close took. */
static long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void die(const char *what)
{
    atm_error(what);
    exit(1);
}

static void expect(int ok, const char *what)
{
    if (!ok) {
        /* What the last call returned, for the failure to say what went wrong. */
        fprintf(stderr, "check failed: %s (atm_errno %d, cause %d)\n", what, atm_errno, atm_cause());
        atm_error("  the last error");
        exit(1);
    }
    printf("ok: %s\n", what);
}

/* The bytes of PDU i: a pattern that moves with i, so a swapped or stale PDU shows. */
static void fill(char *b, int len, int i)
{
    int k;
    for (k = 0; k < len; k++)
        b[k] = (char)((k * 7 + i * 13 + 1) & 0xff);
}

static int serve_echo(int fd, int *pdus)
{
    int n;
    *pdus = 0;
    for (;;) {
        n = atm_recv(fd, buf, (int)sizeof buf);
        if (n == 0 || (n < 0 && atm_errno == ATM_ENOTCONN))
            return 0; /* the caller closed */
        if (n < 0)
            die("server: atm_recv");
        if (atm_send(fd, buf, n) != n)
            die("server: atm_send");
        (*pdus)++;
    }
}

static int server(const char *dev, Atm_sap sap)
{
    Atm_info info;
    Atm_sap got;
    Atm_endpoint caller;
    Atm_qos qos;
    Aal_type aal;
    int lfd, rfd, mfd, cfd, leaf[2], id, i, pdus, n;
    long t0;

    if ((lfd = atm_open(dev, 0, &info)) < 0)
        die("server: atm_open");
    if (atm_bind(lfd, sap, &got, 4) < 0)
        die("server: atm_bind");
    if ((rfd = atm_open(dev, 0, NULL)) < 0 || atm_bind(rfd, sap + 1, NULL, 1) < 0)
        die("server: atm_bind (rejecting SAP)");
    if ((mfd = atm_open(dev, 0, NULL)) < 0 || atm_bind(mfd, sap + 2, NULL, 2) < 0)
        die("server: atm_bind (multicast SAP)");
    printf("server: bound SAPs %u, %u and %u, mtu %d\n", got, sap + 1, sap + 2, (int)info.mtu);
    fflush(stdout);

    /* The echo call: see who calls and what it asks, accept onto a new descriptor. */
    if (atm_listen(lfd, &id, &caller, &qos, &aal) < 0)
        die("server: atm_listen");
    printf("server: call %d from %s, peak %d kbit/s, aal %d\n", id, caller.nsap.address,
           (int)qos.peak_bandwidth.target, (int)aal);
    if ((cfd = atm_open(dev, 0, NULL)) < 0)
        die("server: atm_open (data)");
    if (atm_accept(lfd, cfd, id, &qos, duplex) < 0)
        die("server: atm_accept");
    serve_echo(cfd, &pdus);
    printf("server: echoed %d PDUs\n", pdus);
    atm_close(cfd);

    /* The simplex call (seed 000 section 5.3): PDUs one way, nothing may go back. */
    if (atm_listen(lfd, &id, NULL, NULL, NULL) < 0)
        die("server: atm_listen (simplex)");
    if ((cfd = atm_open(dev, 0, NULL)) < 0)
        die("server: atm_open (simplex)");
    if (atm_accept(lfd, cfd, id, NULL, simplex) < 0)
        die("server: atm_accept (simplex)");
    n = atm_send(cfd, buf, 1);
    printf("server: atm_send on a simplex callee: %s\n",
           n == -1 && atm_errno == ATM_ESTATE ? "ATM_ESTATE" : "sent");
    for (pdus = 0;; pdus++) {
        n = atm_recv(cfd, buf, (int)sizeof buf);
        if (n == 0 || (n < 0 && atm_errno == ATM_ENOTCONN))
            break;
        if (n < 0)
            die("server: atm_recv (simplex)");
    }
    printf("server: the simplex call brought %d PDUs\n", pdus);
    /* How long the close took: the rejecting SAP is served only after it, and the
     * client's call to it gives up after its connect timeout (a diagnostic line for a
     * failure of that call, not checked). */
    t0 = now_ms();
    atm_close(cfd);
    printf("server: closed the simplex call in %ld ms\n", now_ms() - t0);
    fflush(stdout);

    /* The rejected call. */
    if (atm_listen(rfd, &id, NULL, NULL, NULL) < 0)
        die("server: atm_listen (rejecting SAP)");
    if (atm_reject(rfd, id, 21) < 0)
        die("server: atm_reject");
    printf("server: rejected call %d with cause 21\n", id);

    /* Two parties of one multicast call: the first gets every PDU, the second the
     * ones sent before it was dropped. */
    for (i = 0; i < 2; i++) {
        if (atm_listen(mfd, &id, NULL, NULL, NULL) < 0)
            die("server: atm_listen (multicast)");
        if ((leaf[i] = atm_open(dev, 0, NULL)) < 0)
            die("server: atm_open (multicast)");
        if (atm_accept(mfd, leaf[i], id, NULL, multicast) < 0) {
            /* The second party is dropped after five PDUs, and a drop ends a
             * leaf at once: on a loaded machine the root can drop it (and close)
             * before this process has finished accepting it. */
            if (i == 1 && atm_errno == ATM_ENOTCONN) {
                atm_close(leaf[i]);
                leaf[i] = -1;
                continue;
            }
            die("server: atm_accept (multicast)");
        }
    }
    for (i = 0; i < 2; i++) {
        pdus = 0;
        if (leaf[i] < 0) {
            printf("server: party %d received 0 PDUs (dropped before it was accepted)\n", i);
            continue;
        }
        for (;;) {
            n = atm_recv(leaf[i], buf, (int)sizeof buf);
            if (n == 0 || (n < 0 && atm_errno == ATM_ENOTCONN))
                break;
            if (n < 0)
                die("server: atm_recv (multicast)");
            if (n != 64 || buf[0] != (char)pdus) {
                fprintf(stderr, "server: party %d: PDU %d wrong (%d bytes, #%d)\n", i, pdus, n, buf[0]);
                return 1;
            }
            pdus++;
        }
        printf("server: party %d received %d PDUs\n", i, pdus);
        atm_close(leaf[i]);
    }
    atm_close(lfd);
    atm_close(rfd);
    atm_close(mfd);
    printf("server: done\n");
    return 0;
}

static void endpoint(Atm_endpoint *e, const char *addr, Atm_sap sap)
{
    memset(e, 0, sizeof *e);
    snprintf(e->nsap.address, sizeof e->nsap.address, "%s", addr);
    e->asap = sap;
}

static int client(const char *dev, const char *addr, Atm_sap sap)
{
    static char out[16384];
    Atm_info info;
    Atm_endpoint dst;
    Atm_qos qos;
    Atm_qos_sel sel;
    Atm_sap mine;
    int fd, i, r, s, n, total = 0, party;
    char what[160];

    /* A descriptor that was never opened. */
    expect(atm_send(4242, "x", 1) == -1 && atm_errno == ATM_EBADF, "atm_send on a bad descriptor: ATM_EBADF");
    expect(atm_open("/nonexistent/sigd.sock", 0, NULL) == -1 && atm_errno == ATM_ENODEV,
           "atm_open of a device with no sigd: ATM_ENODEV");

    if ((fd = atm_open(dev, 0, &info)) < 0)
        die("client: atm_open");
    expect(info.mtu == 9188, "atm_open reports natm's AAL5 MTU, 9188");
    if (atm_bind(fd, 0, &mine, 0) < 0)
        die("client: atm_bind");
    expect(mine != 0, "atm_bind with SAP 0 assigns one");

    /* The echo call: CBR at 20 Mbit/s each way (FORE's peak in kbit/s). */
    memset(&qos, 0, sizeof qos);
    qos.peak_bandwidth.target = 20000;
    endpoint(&dst, addr, sap);
    if (atm_connect(fd, &dst, &qos, &sel, aal_type_5, duplex) < 0)
        die("client: atm_connect");
    expect(sel.peak_bandwidth == 20000, "the granted peak is the 20,000 kbit/s asked for");

    for (r = 0; r < ROUNDS; r++) {
        for (s = 0; s < NSIZES; s++) {
            i = r * NSIZES + s;
            fill(out, sizes[s], i);
            if (atm_send(fd, out, sizes[s]) != sizes[s])
                die("client: atm_send");
            n = atm_recv(fd, buf, (int)sizeof buf);
            if (n < 0)
                die("client: atm_recv");
            if (n != sizes[s] || memcmp(buf, out, (size_t)n) != 0) {
                fprintf(stderr, "check failed: PDU %d of %d bytes came back as %d bytes%s\n", i,
                        sizes[s], n, n == sizes[s] ? ", different" : "");
                return 1;
            }
            total += n;
        }
    }
    snprintf(what, sizeof what, "%d PDUs of 1 to 9188 bytes echoed intact (%d bytes)",
             ROUNDS * NSIZES, total);
    expect(1, what);

    /* A PDU over the MTU, a buffer too small for the PDU (kept for a larger one). */
    expect(atm_send(fd, out, 9189) == -1 && atm_errno == ATM_EMSGSIZE, "a 9,189-byte PDU: ATM_EMSGSIZE");
    fill(out, 3000, 99);
    if (atm_send(fd, out, 3000) != 3000)
        die("client: atm_send");
    expect(atm_recv(fd, buf, 100) == -1 && atm_errno == ATM_EMSGSIZE,
           "a 3,000-byte PDU into 100 bytes: ATM_EMSGSIZE");
    n = atm_recv(fd, buf, (int)sizeof buf);
    expect(n == 3000 && memcmp(buf, out, 3000) == 0, "the same PDU whole into a larger buffer");
    expect(atm_connect(fd, &dst, NULL, NULL, aal_type_5, duplex) == -1 && atm_errno == ATM_ESTATE,
           "atm_connect on a connected descriptor: ATM_ESTATE");
    atm_close(fd);
    expect(atm_send(fd, out, 1) == -1 && atm_errno == ATM_EBADF, "atm_send after atm_close: ATM_EBADF");

    /* A simplex call to the echo SAP: PDUs one way, and nothing to receive. */
    fd = atm_open(dev, 0, NULL);
    endpoint(&dst, addr, sap);
    if (atm_connect(fd, &dst, NULL, NULL, aal_type_5, simplex) < 0)
        die("client: atm_connect (simplex)");
    for (i = 0; i < 5; i++) {
        fill(out, 500, i);
        if (atm_send(fd, out, 500) != 500)
            die("client: atm_send (simplex)");
    }
    expect(atm_recv(fd, buf, (int)sizeof buf) == -1 && atm_errno == ATM_ESTATE,
           "atm_recv on a simplex caller: ATM_ESTATE");
    atm_close(fd);

    /* Refusals: nobody on the SAP, the application rejects, what natm does not offer. */
    fd = atm_open(dev, 0, NULL);
    endpoint(&dst, addr, 4000);
    expect(atm_connect(fd, &dst, NULL, NULL, aal_type_5, duplex) == -1 && atm_errno == ATM_ENOSAP &&
               atm_cause() == 88,
           "a call to a SAP nobody is bound to: ATM_ENOSAP, UNI cause 88");
    atm_error("  (as atm_error prints it) connect to SAP 4000");
    endpoint(&dst, addr, sap + 1);
    expect(atm_connect(fd, &dst, NULL, NULL, aal_type_5, duplex) == -1 && atm_errno == ATM_EREFUSED &&
               atm_cause() == 21,
           "a call the server rejects with cause 21: ATM_EREFUSED, cause 21");
    expect(atm_connect(fd, &dst, NULL, NULL, aal_type_3_4, duplex) == -1 && atm_errno == ATM_ENOTSUP,
           "AAL 3/4: ATM_ENOTSUP");
    memset(&qos, 0, sizeof qos);
    qos.mean_bandwidth.target = 500;
    expect(atm_connect(fd, &dst, &qos, NULL, aal_type_5, duplex) == -1 && atm_errno == ATM_EQOS,
           "a mean bandwidth without a peak: ATM_EQOS");
    atm_close(fd);

    /* Multicast: two parties of the server's SAP+2, the second dropped half way. */
    fd = atm_open(dev, 0, NULL);
    endpoint(&dst, addr, sap + 2);
    if (atm_connect(fd, &dst, NULL, NULL, aal_type_5, multicast) < 0)
        die("client: atm_connect (multicast)");
    if (atm_add_party(fd, &dst, &party) < 0)
        die("client: atm_add_party");
    expect(party == 1, "the second party's id is 1");
    expect(atm_recv(fd, buf, (int)sizeof buf) == -1 && atm_errno == ATM_ESTATE,
           "atm_recv on a multicast root: ATM_ESTATE");
    for (i = 0; i < 10; i++) {
        memset(out, 0, 64);
        out[0] = (char)i;
        if (i == 5 && atm_drop_party(fd, party) < 0)
            die("client: atm_drop_party");
        if (atm_send(fd, out, 64) != 64)
            die("client: atm_send (multicast)");
    }
    expect(atm_drop_party(fd, 7) == -1, "dropping a party that is not there fails");
    if (atm_close(fd) < 0)
        die("client: atm_close (multicast)");
    printf("all checks passed\n");
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 4 && strcmp(argv[1], "server") == 0)
        return server(argv[2], (Atm_sap)strtoul(argv[3], NULL, 10));
    if (argc == 5 && strcmp(argv[1], "client") == 0)
        return client(argv[2], argv[3], (Atm_sap)strtoul(argv[4], NULL, 10));
    fprintf(stderr, "usage: fore_echo server DEVICE SAP | client DEVICE ADDR SAP\n");
    return 2;
}
