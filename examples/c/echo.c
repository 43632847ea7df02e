/*
 * echo.c: the libnatm example. One process listens and calls itself: the
 * listening side is a non-blocking event loop on poll(2) (natm_listener_fd,
 * natm_conn_fd), the calling side blocks. It echoes COUNT messages of growing
 * size, checks every byte, and prints what the connection reports.
 *
 *   echo LISTEN CALL [QOS] [COUNT]
 *
 *   NATM_SIGD=/run/natm/sigd.sock ./echo echo +4420001:echo reliable 100
 *       through sigd: listen on SAP "echo", call this host's ATM address
 *   ./echo 127.0.0.1:0 - reliable 100
 *       direct mode (no sigd): listen on a UDP port, "-" calls the listener
 *
 * Exit status 0 when every message came back intact.
 */
#define _POSIX_C_SOURCE 200809L
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "natm.h"

#define MAXMSG 65536

static void die(const char *what, long rc)
{
    fprintf(stderr, "echo: %s: %s: %s", what, natm_strerror((int)rc), natm_last_error());
    if (natm_last_cause() != 0)
        fprintf(stderr, " (UNI cause %d)", natm_last_cause());
    fputc('\n', stderr);
    exit(1);
}

/* Wait until fd is readable (or 10 s pass: then something is wrong). */
static void wait_fd(int fd)
{
    struct pollfd p;
    p.fd = fd;
    p.events = POLLIN;
    p.revents = 0;
    if (poll(&p, 1, 10000) != 1) {
        fprintf(stderr, "echo: nothing became ready in 10 s\n");
        exit(1);
    }
}

/* The server side, non-blocking: echo one whole message. A message may come in
 * several pieces (natm_recv stops at the buffer's end or a TPDU's); it is sent
 * back whole once its last piece is in. */
static size_t echo_one(natm_conn *srv, unsigned char *msg)
{
    size_t have = 0;
    int eom = 0;
    ssize_t n;
    while (!eom) {
        n = natm_recv(srv, msg + have, MAXMSG - have, NATM_NONBLOCK, &eom);
        if (n == NATM_EAGAIN) {
            wait_fd(natm_conn_fd(srv, NATM_FD_RECV));
            continue;
        }
        if (n < 0)
            die("server recv", n);
        if (n == 0 && !eom)
            return 0; /* the caller closed */
        have += (size_t)n;
    }
    while ((n = natm_send(srv, msg, have, NATM_NONBLOCK)) == NATM_EAGAIN)
        wait_fd(natm_conn_fd(srv, NATM_FD_SEND));
    if (n < 0)
        die("server send", n);
    return have;
}

int main(int argc, char **argv)
{
    const char *listen_at, *call, *qos = "reliable";
    char addr[128], granted[256];
    static unsigned char out[MAXMSG], back[MAXMSG], scratch[MAXMSG];
    natm_host *host;
    natm_listener *l;
    natm_conn *cli, *srv;
    struct natm_status st;
    int i, count = 100, rc, eom;
    ssize_t n;

    if (argc < 3) {
        fprintf(stderr, "usage: echo LISTEN CALL [QOS] [COUNT]\n");
        return 2;
    }
    listen_at = argv[1];
    call = argv[2];
    if (argc > 3)
        qos = argv[3];
    if (argc > 4)
        count = atoi(argv[4]);

    /* NULL: the sigd at $NATM_SIGD (direct mode needs none). */
    if ((rc = natm_open(NULL, &host)) < 0)
        die("open", rc);
    if ((rc = natm_listen(host, listen_at, qos, 4, &l)) < 0)
        die("listen", rc);
    if (strcmp(call, "-") == 0) {
        if ((rc = natm_listener_addr(l, addr, sizeof addr)) < 0)
            die("listener address", rc);
        call = addr;
    }
    printf("libnatm %s: listening on %s, calling %s with %s\n", natm_version(), listen_at,
           call, qos);

    /* The library accepts calls in the background (up to the backlog), so the
     * blocking connect returns before natm_accept is called. */
    if ((rc = natm_connect(host, call, qos, &cli)) < 0)
        die("connect", rc);
    while ((rc = natm_accept(l, NATM_NONBLOCK, &srv)) == NATM_EAGAIN)
        wait_fd(natm_listener_fd(l));
    if (rc < 0)
        die("accept", rc);
    if (natm_granted_qos(cli, granted, sizeof granted) > 0)
        printf("granted: %s\n", granted);

    for (i = 0; i < count; i++) {
        size_t len = 1 + ((size_t)i * 997) % (MAXMSG - 1), got = 0, j;
        for (j = 0; j < len; j++)
            out[j] = (unsigned char)(i * 31 + j);
        if ((n = natm_send(cli, out, len, 0)) < 0)
            die("client send", n);
        if (echo_one(srv, scratch) != len) {
            fprintf(stderr, "echo: the server saw a message of the wrong size\n");
            return 1;
        }
        eom = 0;
        while (!eom) {
            n = natm_recv(cli, back + got, sizeof back - got, 0, &eom);
            if (n < 0)
                die("client recv", n);
            if (n == 0 && !eom) {
                fprintf(stderr, "echo: the connection ended early\n");
                return 1;
            }
            got += (size_t)n;
        }
        if (got != len || memcmp(out, back, len) != 0) {
            fprintf(stderr, "echo: message %d came back different\n", i);
            return 1;
        }
    }

    /* Close in order: the server sees the end of data, then closes too. */
    natm_shutdown(cli);
    if (echo_one(srv, scratch) != 0) {
        fprintf(stderr, "echo: data after the end\n");
        return 1;
    }
    natm_shutdown(srv);
    n = natm_recv(cli, back, sizeof back, 0, &eom);
    if (n != 0 || eom) {
        fprintf(stderr, "echo: the client did not see the end of data\n");
        return 1;
    }
    if ((rc = natm_status(cli, &st)) < 0)
        die("status", rc);
    printf("echoed %d messages: %llu bytes sent, %llu received, %llu retransmissions, "
           "srtt %llu us, %s\n",
           count, (unsigned long long)st.bytes_sent, (unsigned long long)st.bytes_received,
           (unsigned long long)st.retransmissions, (unsigned long long)st.srtt_us,
           st.signalled ? "through sigd" : "direct mode");
    natm_conn_close(cli);
    natm_conn_close(srv);
    natm_listener_close(l);
    natm_host_close(host, 5000);
    return 0;
}
