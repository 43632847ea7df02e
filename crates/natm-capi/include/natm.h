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

/* Flag of natm_send, natm_recv and natm_accept: return NATM_EAGAIN, not wait. */
#define NATM_NONBLOCK 1

/* natm_conn_fd's which: the descriptor for natm_recv, or for natm_send. */
#define NATM_FD_RECV 0
#define NATM_FD_SEND 1

typedef struct NatmHost natm_host;
typedef struct NatmListener natm_listener;
typedef struct NatmConn natm_conn;

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
int natm_status(const natm_conn *c, struct natm_status *out);
int natm_release_detail(const natm_conn *c, char *buf, size_t len);
int natm_granted_qos(const natm_conn *c, char *buf, size_t len);
void natm_conn_close(natm_conn *c);

#ifdef __cplusplus
}
#endif

#endif /* NATM_H */
