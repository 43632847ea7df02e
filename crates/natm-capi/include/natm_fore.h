/*
 * natm_fore.h: a FORE Systems-style ATM API (seed 002: Subramanyan, "Protocol
 * Overhead in ATM networks", section 3.1) over natm, in libnatm beside natm.h.
 *
 * Link as for natm.h (-lnatm, or libnatm.a and its dependencies).
 * Reference and the departures from FORE's library: docs/capi.md, "The FORE API
 * (seed 002)". tests/capi.rs checks that every atm_ symbol libnatm.so exports is
 * declared here and nothing more.
 *
 * The shape is FORE's: a descriptor from atm_open, a SAP bound with a queue length,
 * atm_connect to an endpoint with a QoS, atm_listen returning the connection id of
 * an incoming call that atm_accept (onto a descriptor) or atm_reject answers,
 * atm_send/atm_recv of one AAL5 PDU each, atm_add_party/atm_drop_party on a
 * multicast connection, atm_close. Failures return -1 and set atm_errno.
 *
 * natm's mapping: the device path names the sigd socket (a "/dev/..." path, NULL or
 * "" means $NATM_SIGD, else /run/natm/sigd.sock); addresses are natm's ATM
 * addresses as text ("+4420001", or a name sigd knows); a SAP number N is natm's
 * SAP "N"; AAL5 connections carry bare AAL5 PDUs (natm's transport=none): no
 * retransmission or flow control, as on FORE's adapters.
 */
#ifndef NATM_FORE_H
#define NATM_FORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* atm_errno values (positive; every call returns -1 and sets one on failure). */
#define ATM_EBADF 1       /* not a descriptor from atm_open, or already closed */
#define ATM_EINVAL 2      /* a bad argument: NULL, out of range, unknown conn id */
#define ATM_ENODEV 3      /* no signalling daemon at the device path (or it went away) */
#define ATM_EQOS 4        /* a QoS natm cannot express or use */
#define ATM_EREFUSED 5    /* the call was refused: atm_cause() has the UNI cause */
#define ATM_ENOBW 6       /* refused: the bandwidth asked for is not available (cause 37/47) */
#define ATM_ENOSAP 7      /* refused: nobody is bound to that SAP there (cause 88) */
#define ATM_ENOTCONN 8    /* no connection on the descriptor, or it ended (released, aborted) */
#define ATM_ESTATE 9      /* the descriptor is in the wrong state for the call */
#define ATM_EMSGSIZE 10   /* a PDU larger than the MTU (or the buffer), or empty */
#define ATM_ETIMEDOUT 11  /* no answer in time */
#define ATM_ENOTSUP 12    /* FORE has it, natm does not (AAL 3/4, raw cells, ...) */
#define ATM_EIO 13        /* a socket operation failed */
#define ATM_EINTERNAL 14  /* a bug in libnatm (caught; please report it) */

/* An application SAP (FORE's ASAP): natm's SAP is its decimal text, 1..99999999. */
typedef uint32_t Atm_sap;

/* An ATM address as natm's text ("+4420001", or a name sigd resolves), NUL-terminated
 * (FORE's was a binary NSAP or SPANS address). */
#define ATM_ADDRESS_LEN 64
typedef struct {
    char address[ATM_ADDRESS_LEN];
} Atm_address;

/* A called or calling endpoint: the address and the SAP. */
typedef struct {
    Atm_address nsap;
    Atm_sap asap;
} Atm_endpoint;

/* One QoS parameter: what is asked for and the least that will do. Bandwidths are
 * kbit/s of payload, bursts kbit. */
typedef struct {
    int32_t target;
    int32_t minimum;
} Atm_qos_spec;

/* The QoS asked for. All zero: best effort (UBR). A peak only (or a mean equal to
 * it): CBR at the peak. A mean below the peak: VBR (PCR peak, SCR mean, MBS the
 * burst in cells). */
typedef struct {
    Atm_qos_spec peak_bandwidth;
    Atm_qos_spec mean_bandwidth;
    Atm_qos_spec mean_burst;
} Atm_qos;

/* The QoS the network granted (kbit/s, kbit). */
typedef struct {
    int32_t peak_bandwidth;
    int32_t mean_bandwidth;
    int32_t mean_burst;
} Atm_qos_sel;

typedef enum {
    aal_type_null = 0, /* raw cells: not offered (ATM_ENOTSUP) */
    aal_type_1 = 1,    /* not offered (nor were they by FORE) */
    aal_type_2 = 2,
    aal_type_3_4 = 3,  /* not offered: natm has AAL5 only */
    aal_type_5 = 5     /* AAL5 */
} Aal_type;

typedef enum {
    duplex = 0,        /* both ways, the same QoS each way */
    simplex = 1,       /* one way, caller to callee; the unused way: ATM_ESTATE */
    multicast = 2      /* point to multipoint: atm_add_party, atm_drop_party */
} Atm_dataflow;

/* What atm_open tells about the device. */
typedef struct {
    int32_t mtu;       /* the largest PDU atm_send takes (natm's max_sdu, 9188) */
} Atm_info;

/* The calling thread's last error (per thread, as errno). */
int *atm_errno_location(void);
#define atm_errno (*atm_errno_location())

/* Print "msg: what failed: the detail" on stderr, as perror does. */
void atm_error(const char *msg);
/* The text of an atm_errno value (static). */
const char *atm_strerror(int code);
/* The UNI cause (Q.2931) of this thread's last refused call; 0 if none. */
int atm_cause(void);

/* Open a descriptor on the device: the path of a sigd socket, or a "/dev/..." path,
 * NULL or "" for the default sigd. flags is ignored (O_RDWR). info may be NULL. */
int atm_open(const char *device, int flags, Atm_info *info);
/* Bind a SAP (0: the library picks one, returned in *sap_assigned). qlen > 0 makes
 * the descriptor a listener with up to qlen calls waiting; 0: a calling end. */
int atm_bind(int fd, Atm_sap sap, Atm_sap *sap_assigned, int qlen);
/* Call dst with qos (NULL: best effort) and the AAL; blocks until connected or
 * refused. qos_selected (may be NULL) gets what was granted. */
int atm_connect(int fd, const Atm_endpoint *dst, const Atm_qos *qos,
                Atm_qos_sel *qos_selected, Aal_type aal, Atm_dataflow dataflow);
/* Wait for an incoming call on a bound descriptor: its id, the caller (dst; asap is
 * the SAP called), the QoS it asks for (what it sends) and the AAL. Out pointers
 * other than conn_id may be NULL. */
int atm_listen(int fd, int *conn_id, Atm_endpoint *dst, Atm_qos *qos, Aal_type *aal);
/* Accept call conn_id of listener fd onto newfd (from atm_open, not connected; may
 * be fd itself). qos is ignored: natm takes the call with the QoS it asked for. */
int atm_accept(int fd, int newfd, int conn_id, const Atm_qos *qos, Atm_dataflow dataflow);
/* Refuse call conn_id with a UNI cause (21: call rejected). */
int atm_reject(int fd, int conn_id, int cause);
/* Send one PDU of len bytes (1..mtu); returns len. */
int atm_send(int fd, const void *buf, int len);
/* Receive one PDU into buf; returns its length, 0 when the connection has ended in
 * order. A PDU longer than len is ATM_EMSGSIZE and stays for the next call. */
int atm_recv(int fd, void *buf, int len);
/* Add a party (leaf) to a multicast connection; *conn_id (may be NULL) is its id.
 * The first party, from atm_connect, is 0. */
int atm_add_party(int fd, const Atm_endpoint *dst, int *conn_id);
/* Drop party conn_id: what was sent to it before is still delivered. */
int atm_drop_party(int fd, int conn_id);
/* Close the descriptor: its connection in order, its SAP unbound, calls waiting
 * rejected. */
int atm_close(int fd);

#ifdef __cplusplus
}
#endif

#endif /* NATM_FORE_H */
