/*
 * readiness.c: the contract of libnatm's non-blocking calls and descriptors
 * (docs/capi.md), checked in direct mode on loopback. Run by tests/capi.rs;
 * exits non-zero, saying which check failed, if one does.
 */
#define _POSIX_C_SOURCE 200809L
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "natm.h"

#define CHECK(cond, what)                                                          \
    do {                                                                           \
        if (!(cond)) {                                                             \
            fprintf(stderr, "readiness: FAILED line %d: %s (last error: %s)\n",    \
                    __LINE__, what, natm_last_error());                            \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

static int readable(int fd, int ms)
{
    struct pollfd p;
    p.fd = fd;
    p.events = POLLIN;
    p.revents = 0;
    return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

int main(void)
{
    natm_host *h;
    natm_listener *l;
    natm_conn *cli, *srv;
    char addr[128], buf[70000];
    static char big[8192];
    struct natm_status st;
    int eom = -1, lfd, rfd, tfd, again = 0;
    long long sent = 0, got = 0, target;
    ssize_t n;
    int i;

    /* Errors: codes, and the sentence saying what was wrong. */
    CHECK(natm_open("", NULL) == NATM_EINVAL, "a NULL out pointer is refused");
    CHECK(natm_connect(NULL, "x", "reliable", &cli) == NATM_EINVAL, "NULL host");
    CHECK(strstr(natm_last_error(), "host is NULL") != NULL, "the message names the argument");
    CHECK(strcmp(natm_strerror(NATM_EAGAIN), "would block") == 0, "natm_strerror");

    CHECK(natm_open("", &h) == 0, "open a host without sigd");
    CHECK(natm_listen(h, "127.0.0.1:0", "reliable", 2, &l) == 0, "listen");
    CHECK(natm_listen(h, "127.0.0.1:0", "reliable", 0, &l) == NATM_EINVAL, "backlog 0");
    CHECK(natm_listen(h, "127.0.0.1:0", "cbr:pcr=fast", 1, &l) == NATM_EQOS, "bad QoS");
    CHECK(strstr(natm_last_error(), "fast") != NULL, "the QoS error points at the token");
    CHECK(natm_listener_addr(l, addr, sizeof addr) > 0, "listener address");
    lfd = natm_listener_fd(l);
    CHECK(lfd >= 0, "listener fd");
    CHECK(!readable(lfd, 0), "no call yet: the listener's descriptor is not readable");
    CHECK(natm_accept(l, NATM_NONBLOCK, &srv) == NATM_EAGAIN, "no call yet: EAGAIN");

    CHECK(natm_connect(h, addr, "reliable", &cli) == 0, "connect");
    CHECK(readable(lfd, 5000), "a call makes the listener's descriptor readable");
    CHECK(natm_accept(l, NATM_NONBLOCK, &srv) == 0, "accept the waiting call");
    CHECK(natm_accept(l, NATM_NONBLOCK, &srv) == NATM_EAGAIN, "nobody else calls");
    CHECK(!readable(lfd, 0), "and then the descriptor is clear");

    /* Receiving: EAGAIN clears the descriptor, a message sets it. */
    rfd = natm_conn_fd(srv, NATM_FD_RECV);
    CHECK(rfd >= 0 && natm_conn_fd(srv, 7) == NATM_EINVAL, "descriptors");
    CHECK(natm_recv(srv, buf, sizeof buf, NATM_NONBLOCK, &eom) == NATM_EAGAIN, "empty");
    CHECK(!readable(rfd, 0), "after EAGAIN the receive descriptor is clear");
    CHECK(!readable(rfd, 100), "and stays clear while nothing comes");
    CHECK(natm_send(cli, "hello", 5, 0) == 5, "send");
    CHECK(readable(rfd, 5000), "a message makes it readable");
    n = natm_recv(srv, buf, sizeof buf, NATM_NONBLOCK, &eom);
    CHECK(n == 5 && eom == 1 && memcmp(buf, "hello", 5) == 0, "the message, whole");
    CHECK(readable(rfd, 0), "after a success it stays readable until EAGAIN");

    /* A message larger than the buffer comes in pieces; the last ends it. */
    memset(big, 'x', sizeof big);
    CHECK(natm_send(cli, big, 1000, 0) == 1000, "send 1000 bytes");
    got = 0;
    eom = 0;
    while (!eom) {
        n = natm_recv(srv, buf, 300, 0, &eom);
        CHECK(n > 0 && n <= 300, "a piece of at most the buffer's size");
        got += n;
    }
    CHECK(got == 1000, "the pieces add up to the message");

    /* Sending: fill the window without reading until EAGAIN, then drain with
     * the receive descriptor and send on with the send descriptor. */
    tfd = natm_conn_fd(cli, NATM_FD_SEND);
    for (i = 0; i < 100000 && !again; i++) {
        n = natm_send(cli, big, sizeof big, NATM_NONBLOCK);
        if (n == NATM_EAGAIN)
            again = 1;
        else {
            CHECK(n == (ssize_t)sizeof big, "a non-blocking send takes all or nothing");
            sent += n;
        }
    }
    CHECK(again, "a receiver that does not read fills the window: EAGAIN");
    target = sent + 64 * (long long)sizeof big;
    got = 0;
    while (got < target) {
        struct pollfd p[2];
        p[0].fd = rfd;
        p[1].fd = tfd;
        p[0].events = p[1].events = POLLIN;
        p[0].revents = p[1].revents = 0;
        CHECK(poll(p, sent < target ? 2 : 1, 10000) > 0, "something becomes ready");
        while ((n = natm_recv(srv, buf, sizeof buf, NATM_NONBLOCK, &eom)) > 0)
            got += n;
        CHECK(n == NATM_EAGAIN, "receive until EAGAIN");
        while (sent < target) {
            n = natm_send(cli, big, sizeof big, NATM_NONBLOCK);
            if (n == NATM_EAGAIN)
                break;
            CHECK(n == (ssize_t)sizeof big, "a non-blocking send takes all or nothing");
            sent += n;
        }
    }
    CHECK(got == sent, "every byte sent arrived");

    /* The end: 0 and no end-of-message. */
    CHECK(natm_shutdown(cli) == 0, "shutdown");
    CHECK(readable(rfd, 5000), "the end of data makes the descriptor readable");
    n = natm_recv(srv, buf, sizeof buf, NATM_NONBLOCK, &eom);
    CHECK(n == 0 && eom == 0, "end of data");
    CHECK(natm_send(cli, "late", 4, 0) == NATM_ECLOSED, "no sending after shutdown");
    CHECK(natm_status(cli, &st) == 0 && st.bytes_sent == (unsigned long long)sent + 1005,
          "status counts the bytes sent");
    CHECK(st.signalled == 0 && st.released == 0, "direct mode: no call");

    natm_conn_close(srv);
    natm_conn_close(cli);
    natm_listener_close(l);
    CHECK(natm_host_close(h, 5000) == 1, "everything closed in time");
    printf("readiness: all checks passed\n");
    return 0;
}
