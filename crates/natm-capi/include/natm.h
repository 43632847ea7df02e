/*
 * natm.h: the C API of natm, a user-space native-mode ATM protocol stack.
 *
 * Link with -lnatm (libnatm.so), or libnatm.a followed by
 * -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc.
 * Reference: docs/capi.md. Kept by hand beside crates/natm-capi/src/lib.rs;
 * tests/capi.rs checks that every symbol libnatm.so exports is declared here.
 *
 * Conventions:
 *  - Handles (natm_host, natm_listener, natm_conn) are opaque. A handle may be
 *    used from several threads at once, except that its close call must be the
 *    last use of it.
 *  - Calls return a non-negative result or a negative NATM_E* code; the full
 *    sentence (sigd's cause and reason for a refused or released call) is in
 *    natm_last_error(), the UNI cause in natm_last_cause(), both per thread.
 *    A call that succeeds leaves errno as it found it.
 *  - QoS is Linux-ATM text: "reliable", "ubr", "cbr:pcr=10Mbps", ...
 *  - Addresses: an ATM address or name with an optional ":SAP" goes through
 *    the host's sigd; an IP socket address ("127.0.0.1:7000") is direct mode.
 */
#ifndef NATM_H
#define NATM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes (negative returns). */
#define NATM_OK 0
#define NATM_EINVAL (-1)        /* a bad argument: NULL, not UTF-8, out of range */
#define NATM_EAGAIN (-2)        /* NATM_NONBLOCK and the call would wait */
#define NATM_EQOS (-3)          /* bad QoS text, or a rate outside the agreed bounds */
#define NATM_EREFUSED (-4)      /* the call was refused: natm_last_cause() says why */
#define NATM_ENOSIGD (-5)       /* no sigd reachable, or the call needs one */
#define NATM_ESIGDGONE (-6)     /* sigd went away or closed the session */
#define NATM_ETIMEDOUT (-7)     /* no answer in time */
#define NATM_EUNREACHABLE (-8)  /* direct mode: nobody answered at that address */
#define NATM_EABORTED (-9)      /* the connection was aborted */
#define NATM_ECLOSED (-10)      /* closed in this direction */
#define NATM_EMSGSIZE (-11)     /* message larger than agreed (or empty on bare AAL5) */
#define NATM_EIO (-12)          /* a socket operation failed */
#define NATM_EUNBOUND (-13)     /* the listener takes no more calls, for good */
#define NATM_EINTERNAL (-14)    /* a bug in libnatm (caught; please report it) */
#define NATM_EQOSBOUNDS (-15)   /* a rate outside the bounds agreed at setup: nothing sent */
#define NATM_EQOSREFUSED (-16)  /* the peer refused the QoS change (or never answered) */
#define NATM_EQOSPENDING (-17)  /* another QoS change still waits for the peer's answer */

/* Flag of natm_send, natm_recv and natm_accept: return NATM_EAGAIN, not wait. */
#define NATM_NONBLOCK 1

/* natm_conn_fd's which: the descriptor for natm_recv, or for natm_send. */
#define NATM_FD_RECV 0
#define NATM_FD_SEND 1
#define NATM_FD_EVENT 2

/* struct natm_flags's bits: seed 003's status flags. */
#define NATM_F_MSG_START 0x1        /* these bytes start a message */
#define NATM_F_MSG_END 0x2          /* these bytes end it */
#define NATM_F_PEER_CLOSED 0x4      /* the peer closed; everything it sent was delivered */
#define NATM_F_CLOSED 0x8           /* this end's close completed */
#define NATM_F_ABORTED 0x10         /* aborted: abort_reason says why */
#define NATM_F_WINDOW_FULL 0x20     /* the last send found the window full */
#define NATM_F_OVER_RATE 0x40       /* sending faster than the agreed rate */
#define NATM_F_QOS_PENDING 0x80     /* this end's QoS change waits for the peer */
#define NATM_F_QOS_CHANGED 0x100    /* this end's last change was accepted (qos_rate_bps) */
#define NATM_F_QOS_REFUSED 0x200    /* this end's last change was refused (qos_rate_bps) */
#define NATM_F_PEER_QOS_CHANGED 0x400 /* the peer changed its rate (peer_qos_rate_bps) */
#define NATM_F_PEER_QOS_REFUSED 0x800 /* the peer's change was refused here */
#define NATM_F_RELEASED 0x1000      /* sigd ended the call */

/* abort_reason, and a NATM_EV_ABORTED event's cause. */
#define NATM_ABORT_LOCAL 1          /* this application aborted */
#define NATM_ABORT_PEER 2           /* the peer aborted (or sigd released the call) */
#define NATM_ABORT_TIMEOUT 3        /* the peer or the path is gone */
#define NATM_ABORT_REFUSED 4        /* the peer refused the connection parameters */
#define NATM_ABORT_NO_LISTENER 5    /* nothing listens at the peer's address (ICMP) */

/* struct natm_event's kind. */
#define NATM_EV_QOS_PENDING 1       /* this end asked for rate_bps */
#define NATM_EV_QOS_CHANGED 2       /* the peer accepted: rate_bps is in force */
#define NATM_EV_QOS_REFUSED 3       /* the peer refused rate_bps, or never answered */
#define NATM_EV_PEER_QOS_CHANGED 4  /* the peer now sends at rate_bps */
#define NATM_EV_PEER_QOS_REFUSED 5  /* the peer asked for rate_bps, refused here */
#define NATM_EV_WINDOW_FULL 6       /* a NATM_NONBLOCK send found the window full */
#define NATM_EV_OVER_RATE 7         /* a NATM_NONBLOCK send was over the agreed rate */
#define NATM_EV_PEER_CLOSED 8       /* the peer closed; everything was delivered */
#define NATM_EV_CLOSED 9            /* this end's close completed */
#define NATM_EV_ABORTED 10          /* aborted: cause is NATM_ABORT_* */
#define NATM_EV_RELEASED 11         /* sigd ended the call: cause (UNI), detail */
#define NATM_EV_PATH_MTU 12         /* the path MTU search confirmed cause octets;
                                       detail "searching" or "complete" */

/* struct natm_leaf_event's kind. */
#define NATM_LEAF_ADDED 1
#define NATM_LEAF_LEFT 2            /* left by itself: cause (UNI), detail */
#define NATM_LEAF_DROPPED 3         /* natm_drop_sink finished */

typedef struct NatmHost natm_host;
typedef struct NatmListener natm_listener;
typedef struct NatmConn natm_conn;
typedef struct NatmMp natm_mp;

/* natm_flags: seed 003's status flags, with the rates each way. */
struct natm_flags {
    uint32_t bits;                /* NATM_F_* */
    int abort_reason;             /* NATM_ABORT_*, 0: not aborted */
    uint64_t tx_rate_bps;         /* sending VC's rate in force (0: none) */
    uint64_t rx_rate_bps;         /* receiving VC's rate as the peer last set it */
    uint64_t qos_rate_bps;        /* this end's last QoS change: rate got or refused */
    uint64_t peer_qos_rate_bps;   /* the peer's last change: rate got or refused */
};

/* natm_event: a status change (natm_next_event). */
struct natm_event {
    int kind;                     /* NATM_EV_* */
    int cause;                    /* RELEASED: UNI cause; ABORTED: NATM_ABORT_*;
                                     PATH_MTU: the size confirmed, octets */
    uint64_t rate_bps;            /* the QoS events' rate */
    char detail[128];             /* RELEASED: sigd's sentence; PATH_MTU:
                                     "searching" or "complete"; else "" */
};

/* natm_leaf_event: what happened to a leaf of a multipoint root. */
struct natm_leaf_event {
    int kind;                     /* NATM_LEAF_* */
    int leaf;                     /* as natm_add_sink returned it */
    int cause;                    /* LEFT: UNI cause */
    char detail[128];             /* LEFT: what sigd said or what failed */
};

/* natm_status: a connection's counters and call state. */
struct natm_status {
    uint64_t bytes_sent;          /* payload bytes sent (first transmissions) */
    uint64_t bytes_retransmitted; /* payload bytes retransmitted */
    uint64_t tpdus_sent;          /* data TPDUs sent (first transmissions) */
    uint64_t retransmissions;     /* retransmissions of every kind */
    uint64_t bytes_received;      /* payload bytes delivered to this application */
    uint64_t messages_received;   /* messages delivered whole */
    uint64_t send_queued;         /* bytes on the sending VC: unsent or unacked */
    uint64_t recv_queued;         /* bytes on the receiving VC: out of order, unread */
    uint64_t srtt_us;             /* smoothed RTT, microseconds (0: no sample) */
    uint64_t rate_bps;            /* flow controller's rate, bit/s (0: none) */
    uint64_t window;              /* flow controller's window, TPDUs (0: none) */
    uint64_t granted_tx_bps;      /* rate reserved for this side's sending (0: none) */
    int signalled;                /* 1: set up through sigd, 0: direct mode */
    int released;                 /* 1: sigd ended the call */
    int release_cause;            /* its UNI cause (16: normal clearing), else 0 */
    int is_stream;                /* 1: the sending VC carries a byte stream */
    struct natm_flags flags;      /* status flags now (no MSG_START/MSG_END) */
    uint64_t events_dropped;      /* status events dropped untaken (queue of 64) */
};

/* Errors */
const char *natm_strerror(int code);
const char *natm_last_error(void);
int natm_last_cause(void);
const char *natm_version(void);

/* Hosts: sigd_socket NULL = $NATM_SIGD or /run/natm/sigd.sock; "" = none. */
int natm_open(const char *sigd_socket, natm_host **out);
int natm_host_close(natm_host *host, uint32_t linger_ms);

/* Listeners */
int natm_listen(const natm_host *host, const char *addr, const char *qos, int backlog,
                natm_listener **out);
int natm_accept(const natm_listener *l, int flags, natm_conn **out);
int natm_listener_fd(const natm_listener *l);
int natm_listener_addr(const natm_listener *l, char *buf, size_t len);
void natm_listener_close(natm_listener *l);

/* Connections */
int natm_connect(const natm_host *host, const char *addr, const char *qos, natm_conn **out);
ssize_t natm_send(const natm_conn *c, const void *buf, size_t len, int flags);
ssize_t natm_recv(const natm_conn *c, void *buf, size_t len, int flags, int *end_of_message);
int natm_conn_fd(const natm_conn *c, int which);
int natm_shutdown(const natm_conn *c);
int natm_flush(const natm_conn *c, uint32_t timeout_ms);
int natm_abort(const natm_conn *c);
int natm_set_rate(const natm_conn *c, uint64_t bps);
int natm_set_qos(const natm_conn *c, const char *qos, uint32_t timeout_ms, uint64_t *rate_bps);
int natm_try_set_qos(const natm_conn *c, const char *qos);
ssize_t natm_recv_status(const natm_conn *c, void *buf, size_t len, int flags,
                         struct natm_flags *out);
int natm_next_event(const natm_conn *c, int timeout_ms, struct natm_event *out);
int natm_status(const natm_conn *c, struct natm_status *out);
int natm_release_detail(const natm_conn *c, char *buf, size_t len);
int natm_granted_qos(const natm_conn *c, char *buf, size_t len);
void natm_conn_close(natm_conn *c);

/* Point-to-multipoint roots */
int natm_mp_connect(const natm_host *host, const char *first_leaf, const char *qos,
                    natm_mp **out);
int natm_add_sink(const natm_mp *mp, const char *addr);
int natm_drop_sink(const natm_mp *mp, int leaf, uint32_t timeout_ms);
ssize_t natm_mp_send(const natm_mp *mp, const void *buf, size_t len);
int natm_mp_leaves(const natm_mp *mp, int *ids, size_t n);
int natm_mp_next_event(const natm_mp *mp, struct natm_leaf_event *out);
int natm_mp_close(natm_mp *mp, uint32_t timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* NATM_H */
