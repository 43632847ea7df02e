/*
 * mpqos.c: QoS changes, status flags and events, and a point-to-multipoint
 * root, in one process.
 *
 *   mpqos direct          leaves and receiver listen on UDP ports (no sigd)
 *   mpqos ATMADDR         through the host's sigd ($NATM_SIGD): they bind SAPs
 *                         and are called at ATMADDR:SAP (e.g. +4420001)
 *
 * Part 1, multipoint: three leaves (threads) listen; a guaranteed root
 * (natm_mp_connect, natm_add_sink) sends numbered messages to all three, drops
 * leaf 1 half way (natm_drop_sink) and goes on to the other two; it prints its
 * leaf events (natm_mp_next_event) and each leaf what it received.
 *
 * Part 2, QoS changes: a guaranteed VC reserved at 8 Mbit/s with a floor of
 * 1 Mbit/s changes its rate to 4 Mbit/s (natm_set_qos, blocking), then 2 Mbit/s
 * (natm_try_set_qos, the answer taken from the event descriptor with poll), and
 * asks for 16 Mbit/s, beyond the bounds (NATM_EQOSBOUNDS). The receiver waits
 * with poll(2) on its receive and event descriptors and prints the rate the
 * status flags give with each message and every status event.
 *
 * Exit status 0 when every check held.
 */
#define _POSIX_C_SOURCE 200809L
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "natm.h"

#define LEAVES 3
#define MESSAGES 60
#define DROP_AFTER 30
#define MSGLEN 1000

static natm_host *host;
static const char *atm; /* NULL: direct mode */
static int failed;

static void die(const char *what, long rc)
{
    fprintf(stderr, "mpqos: %s: %s: %s", what, natm_strerror((int)rc), natm_last_error());
    if (natm_last_cause() != 0)
        fprintf(stderr, " (UNI cause %d)", natm_last_cause());
    fputc('\n', stderr);
    exit(1);
}

static void check(int ok, const char *what)
{
    printf("%s: %s\n", ok ? "ok" : "FAILED", what);
    if (!ok)
        failed = 1;
}

/* Listen on SAP `sap` (through sigd) or a fresh UDP port (direct mode), and put
 * the address callers use in `addr`. */
static natm_listener *listen_at(const char *sap, const char *qos, char *addr, size_t len)
{
    natm_listener *l;
    int rc = natm_listen(host, atm ? sap : "127.0.0.1:0", qos, 4, &l);
    if (rc < 0)
        die("natm_listen", rc);
    if (atm)
        snprintf(addr, len, "%s:%s", atm, sap);
    else if ((rc = natm_listener_addr(l, addr, len)) < 0)
        die("natm_listener_addr", rc);
    return l;
}

/* ---- Part 1: a multipoint root and three leaves ---- */

struct leaf {
    natm_listener *l;
    char addr[128];
    int got;      /* messages received whole */
    int last;     /* number of the last one, -1: none */
    int in_order; /* each one the next number */
};

static void *leaf_main(void *arg)
{
    struct leaf *lf = arg;
    natm_conn *c;
    unsigned char buf[MSGLEN];
    size_t have = 0;
    struct natm_flags f;
    ssize_t n;
    int rc = natm_accept(lf->l, 0, &c);
    if (rc < 0)
        die("leaf natm_accept", rc);
    lf->last = -1;
    lf->in_order = 1;
    for (;;) {
        n = natm_recv_status(c, buf + have, sizeof buf - have, 0, &f);
        if (n < 0)
            break; /* dropped or aborted */
        if (n == 0 && !(f.bits & NATM_F_MSG_END))
            break; /* the end of data */
        have += (size_t)n;
        if (f.bits & NATM_F_MSG_END) {
            int num = buf[0] << 8 | buf[1];
            if (num != lf->last + 1)
                lf->in_order = 0;
            lf->last = num;
            lf->got++;
            have = 0;
        }
    }
    natm_conn_close(c);
    return NULL;
}

static void multipoint(void)
{
    struct leaf lv[LEAVES];
    pthread_t t[LEAVES];
    natm_mp *root;
    unsigned char msg[MSGLEN];
    struct natm_leaf_event ev;
    int ids[8];
    int i, rc, reached_ok = 1, added = 0, dropped = -1;

    memset(lv, 0, sizeof lv);
    for (i = 0; i < LEAVES; i++) {
        char sap[16];
        snprintf(sap, sizeof sap, "mcq%d", i);
        lv[i].l = listen_at(sap, "best-effort", lv[i].addr, sizeof lv[i].addr);
        pthread_create(&t[i], NULL, leaf_main, &lv[i]);
    }
    rc = natm_mp_connect(host, lv[0].addr, "guaranteed:pcr=4Mbps", &root);
    if (rc < 0)
        die("natm_mp_connect", rc);
    for (i = 1; i < LEAVES; i++) {
        rc = natm_add_sink(root, lv[i].addr);
        if (rc < 0)
            die("natm_add_sink", rc);
        printf("leaf %d added at %s\n", rc, lv[i].addr);
    }
    check(natm_mp_leaves(root, ids, 8) == LEAVES, "three leaves receive");
    for (i = 0; i < MESSAGES; i++) {
        ssize_t reached;
        if (i == DROP_AFTER) {
            rc = natm_drop_sink(root, 1, 5000);
            if (rc < 0)
                die("natm_drop_sink", rc);
        }
        memset(msg, i, sizeof msg);
        msg[0] = (unsigned char)(i >> 8);
        msg[1] = (unsigned char)i;
        reached = natm_mp_send(root, msg, sizeof msg);
        if (reached < 0)
            die("natm_mp_send", reached);
        if (reached != (i < DROP_AFTER ? LEAVES : LEAVES - 1))
            reached_ok = 0;
    }
    check(reached_ok, "each message reached every leaf still there");
    check(natm_mp_leaves(root, ids, 8) == 2 && ids[0] == 0 && ids[1] == 2,
          "leaves 0 and 2 remain");
    while ((rc = natm_mp_next_event(root, &ev)) == 0) {
        const char *k = ev.kind == NATM_LEAF_ADDED ? "added"
                        : ev.kind == NATM_LEAF_DROPPED ? "dropped" : "left";
        printf("leaf event: %s leaf %d", k, ev.leaf);
        if (ev.kind == NATM_LEAF_LEFT)
            printf(" (UNI cause %d: %s)", ev.cause, ev.detail);
        putchar('\n');
        if (ev.kind == NATM_LEAF_ADDED)
            added++;
        if (ev.kind == NATM_LEAF_DROPPED)
            dropped = ev.leaf;
    }
    check(rc == NATM_EAGAIN, "no more leaf events: NATM_EAGAIN");
    check(added == LEAVES && dropped == 1, "three leaves added, leaf 1 dropped");
    rc = natm_mp_close(root, 5000);
    if (rc < 0)
        die("natm_mp_close", rc);
    for (i = 0; i < LEAVES; i++) {
        pthread_join(t[i], NULL);
        natm_listener_close(lv[i].l);
        printf("leaf %d received %d messages, the last #%d%s\n", i, lv[i].got, lv[i].last,
               lv[i].in_order ? ", in order" : ", OUT OF ORDER");
    }
    check(lv[1].got == DROP_AFTER && lv[1].last == DROP_AFTER - 1,
          "the dropped leaf received everything sent before its drop, nothing after");
    check(lv[0].last == MESSAGES - 1 && lv[2].last == MESSAGES - 1 && lv[0].in_order &&
              lv[2].in_order && lv[0].got == MESSAGES && lv[2].got == MESSAGES,
          "the other leaves received every message");
}

/* ---- Part 2: QoS changes seen by the receiver ---- */

#define QOS "cbr:pcr=8Mbps,min_pcr=1Mbps"

struct receiver {
    natm_listener *l;
    char addr[128];
    uint64_t rates[8]; /* the receiving VC's rate, each time it changed */
    int nrates;
    uint64_t peer_changes[8]; /* NATM_EV_PEER_QOS_CHANGED events' rates */
    int nchanges;
    int peer_closed; /* NATM_EV_PEER_CLOSED came */
    int messages;
};

static void *receiver_main(void *arg)
{
    struct receiver *r = arg;
    natm_conn *c;
    unsigned char buf[4096];
    struct natm_flags f;
    struct natm_event ev;
    struct pollfd p[2];
    int rc = natm_accept(r->l, 0, &c), open = 1;
    if (rc < 0)
        die("receiver natm_accept", rc);
    p[0].fd = natm_conn_fd(c, NATM_FD_RECV);
    p[1].fd = natm_conn_fd(c, NATM_FD_EVENT);
    while (open || !r->peer_closed) {
        p[0].events = p[1].events = POLLIN;
        if (poll(p, 2, 10000) <= 0) {
            fprintf(stderr, "mpqos: the receiver waited 10 s for nothing\n");
            exit(1);
        }
        if (p[1].revents & POLLIN) {
            while (natm_next_event(c, 0, &ev) == 0) {
                printf("receiver event %d", ev.kind);
                if (ev.kind == NATM_EV_PEER_QOS_CHANGED) {
                    printf(": the peer now sends at %llu bit/s",
                           (unsigned long long)ev.rate_bps);
                    if (r->nchanges < 8)
                        r->peer_changes[r->nchanges++] = ev.rate_bps;
                }
                if (ev.kind == NATM_EV_PEER_CLOSED) {
                    printf(": the peer closed");
                    r->peer_closed = 1;
                }
                putchar('\n');
            }
        }
        while (open) {
            ssize_t n = natm_recv_status(c, buf, sizeof buf, NATM_NONBLOCK, &f);
            if (n == NATM_EAGAIN)
                break;
            if (n < 0)
                die("receiver natm_recv_status", n);
            if (n == 0 && !(f.bits & NATM_F_MSG_END)) {
                open = 0;
                break;
            }
            if (f.bits & NATM_F_MSG_END)
                r->messages++;
            if ((r->nrates == 0 || r->rates[r->nrates - 1] != f.rx_rate_bps) && r->nrates < 8) {
                r->rates[r->nrates++] = f.rx_rate_bps;
                printf("receiver: message %d at %llu bit/s (flags %#x)\n", r->messages,
                       (unsigned long long)f.rx_rate_bps, f.bits);
            }
        }
    }
    natm_conn_close(c);
    return NULL;
}

static void send_some(natm_conn *c, int count)
{
    unsigned char msg[2000];
    int i;
    memset(msg, 0x5a, sizeof msg);
    for (i = 0; i < count; i++) {
        ssize_t n = natm_send(c, msg, sizeof msg, 0);
        if (n < 0)
            die("natm_send", n);
    }
}

static void qos_changes(void)
{
    struct receiver r;
    pthread_t t;
    natm_conn *c;
    struct natm_status st;
    struct natm_event ev;
    struct pollfd p;
    uint64_t rate = 0;
    int rc, got_changed = 0;

    memset(&r, 0, sizeof r);
    r.l = listen_at("qosrx", QOS, r.addr, sizeof r.addr);
    pthread_create(&t, NULL, receiver_main, &r);
    rc = natm_connect(host, r.addr, QOS, &c);
    if (rc < 0)
        die("natm_connect", rc);
    send_some(c, 50);

    /* Blocking: returns once the peer accepted. */
    rc = natm_set_qos(c, "cbr:pcr=4Mbps", 5000, &rate);
    if (rc < 0)
        die("natm_set_qos", rc);
    printf("set_qos: now sending at %llu bit/s\n", (unsigned long long)rate);
    check(rate == 4000000, "the peer accepted 4 Mbit/s");
    send_some(c, 50);

    /* Non-blocking: the answer comes as an event on the event descriptor. */
    rc = natm_try_set_qos(c, "cbr:pcr=2Mbps");
    if (rc < 0)
        die("natm_try_set_qos", rc);
    natm_status(c, &st);
    printf("try_set_qos: sent; flags %#x\n", st.flags.bits);
    p.fd = natm_conn_fd(c, NATM_FD_EVENT);
    while (!got_changed) {
        p.events = POLLIN;
        if (poll(&p, 1, 10000) != 1) {
            fprintf(stderr, "mpqos: no answer to the QoS change in 10 s\n");
            exit(1);
        }
        while (natm_next_event(c, 0, &ev) == 0) {
            printf("sender event %d (rate %llu)\n", ev.kind, (unsigned long long)ev.rate_bps);
            if (ev.kind == NATM_EV_QOS_CHANGED && ev.rate_bps == 2000000)
                got_changed = 1;
            check(ev.kind != NATM_EV_QOS_REFUSED, "the change is not refused");
        }
    }
    natm_status(c, &st);
    check(st.flags.tx_rate_bps == 2000000 && (st.flags.bits & NATM_F_QOS_CHANGED) &&
              !(st.flags.bits & NATM_F_QOS_PENDING),
          "the status says 2 Mbit/s, changed, nothing pending");
    send_some(c, 25);

    /* Beyond the bounds agreed at setup: refused here, nothing sent. */
    rc = natm_set_qos(c, "cbr:pcr=16Mbps", 5000, &rate);
    printf("set_qos 16 Mbit/s: %d (%s): %s\n", rc, natm_strerror(rc), natm_last_error());
    check(rc == NATM_EQOSBOUNDS, "a raise beyond the bounds is NATM_EQOSBOUNDS");
    natm_status(c, &st);
    check(st.flags.tx_rate_bps == 2000000, "the rate stayed at 2 Mbit/s");

    natm_shutdown(c);
    rc = natm_flush(c, 10000);
    if (rc < 0)
        die("natm_flush", rc);
    pthread_join(t, NULL);
    natm_conn_close(c);
    natm_listener_close(r.l);
    printf("receiver: %d messages\n", r.messages);
    check(r.messages == 125, "the receiver got all 125 messages");
    check(r.nrates == 3 && r.rates[0] == 8000000 && r.rates[1] == 4000000 &&
              r.rates[2] == 2000000,
          "the receiver's flags followed the rate: 8, 4, 2 Mbit/s");
    check(r.nchanges == 2 && r.peer_changes[0] == 4000000 && r.peer_changes[1] == 2000000,
          "the receiver had an event for each change");
    check(r.peer_closed, "the receiver had the peer's close as an event");
}

int main(int argc, char **argv)
{
    int rc;
    if (argc != 2) {
        fprintf(stderr, "usage: mpqos direct | mpqos ATMADDR (through $NATM_SIGD)\n");
        return 2;
    }
    atm = strcmp(argv[1], "direct") == 0 ? NULL : argv[1];
    rc = natm_open(atm ? NULL : "", &host);
    if (rc < 0)
        die("natm_open", rc);
    printf("libnatm %s, %s\n", natm_version(), atm ? "through sigd" : "direct mode");
    multipoint();
    qos_changes();
    natm_host_close(host, 5000);
    if (failed) {
        fprintf(stderr, "mpqos: some checks failed\n");
        return 1;
    }
    printf("all checks passed\n");
    return 0;
}
