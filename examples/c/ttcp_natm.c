/*
 * ttcp_natm.c: test natm throughput between two hosts: examples/c/ttcp.c
 * ported from BSD sockets to libnatm (natm.h); the diff is in docs/capi.md.
 * Calls go through the host's sigd ($NATM_SIGD): "host" is an ATM address or
 * name, the port a SAP; each buffer is one natm message.
 *
 * Usage: ttcp_natm -t [-options] host [< in]
 *        ttcp_natm -r [-options] [> out]
 *  -l ##  length of the buffers written or read (default 8192)
 *  -n ##  number of buffers to send with -s (default 2048)
 *  -p ##  SAP to call or listen at (default ttcp)
 *  -q ##  QoS (default reliable), e.g. cbr:pcr=100Mbps
 *  -s     -t: source a pattern to the network; -r: sink (discard) what comes
 *  -v     verbose: print more statistics
 *  Without -s, -t sends its standard input and -r writes to its standard output.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>
#include "natm.h"

static int trans = -1;          /* 1 = transmit, 0 = receive */
static int sinkmode;            /* -s */
static int verbose;             /* -v */
static int buflen = 8 * 1024;   /* -l */
static int nbuf = 2 * 1024;     /* -n */
static const char *port = "ttcp"; /* -p: the SAP */
static const char *qos = "reliable"; /* -q */
static const char *host;        /* -t: where to */
static char *buf;
static long long nbytes;        /* bytes moved */
static long numcalls;           /* I/O calls made */
static natm_host *nh;           /* this host's natm engine */
static natm_conn *conn;         /* the connection */
static struct timeval t0;

static const char usage[] =
    "Usage: ttcp -t [-options] host [ < in ]\n"
    "       ttcp -r [-options] [ > out ]\n"
    "Options:\n"
    "  -l ##  length of bufs read from or written to network (default 8192)\n"
    "  -n ##  number of source bufs written to network with -s (default 2048)\n"
    "  -p ##  SAP to call or listen at (default ttcp)\n"
    "  -q ##  QoS (default reliable)\n"
    "  -s     -t: source a pattern to network; -r: sink (discard) all data\n"
    "  -v     verbose: print more statistics\n";

static void err(const char *s)
{
    fprintf(stderr, "ttcp%s: %s: %s\n", trans ? "-t" : "-r", s, strerror(errno));
    exit(1);
}

/* A natm call failed: its code and libnatm's sentence. */
static void nerr(const char *s, long rc)
{
    fprintf(stderr, "ttcp%s: %s: %s: %s\n", trans ? "-t" : "-r", s,
            natm_strerror((int)rc), natm_last_error());
    exit(1);
}

static void mes(const char *s)
{
    fprintf(stderr, "ttcp%s: %s\n", trans ? "-t" : "-r", s);
}

static void pattern(char *cp, int cnt)
{
    char c = 0;
    while (cnt-- > 0) {
        while (c < ' ' || c > '~')
            c++;            /* printable characters only */
        *cp++ = c++;
    }
}

/* Send buf as one message: natm takes all of it or fails. */
static int Nwrite(natm_conn *d, const char *b, int count)
{
    ssize_t n;
    numcalls++;
    if ((n = natm_send(d, b, count, 0)) < 0)
        nerr("send", n);
    return (int)n;
}

static int Nread(natm_conn *d, char *b, int count)
{
    ssize_t n;
    numcalls++;
    if ((n = natm_recv(d, b, count, 0, NULL)) < 0)
        nerr("recv", n);
    return (int)n;
}

static void open_connection(void)
{
    int rc;

    if ((rc = natm_open(NULL, &nh)) < 0)
        nerr("open", rc);
    if (trans) {
        char called[512];
        snprintf(called, sizeof called, "%s:%s", host, port);
        if ((rc = natm_connect(nh, called, qos, &conn)) < 0)
            nerr("connect", rc);
        mes("connect");
    } else {
        natm_listener *l;
        if ((rc = natm_listen(nh, port, qos, 1, &l)) < 0)
            nerr("listen", rc);
        if ((rc = natm_accept(l, 0, &conn)) < 0)
            nerr("accept", rc);
        natm_listener_close(l);
        mes("accept");
    }
}

/* Close in order; the transmitter waits for the receiver's end of data, sent once
 * it has read every byte, before its process (and its calls) may end. */
static void close_connection(void)
{
    natm_shutdown(conn);
    if (trans)
        while (natm_recv(conn, buf, buflen, 0, NULL) > 0)
            ;
    natm_conn_close(conn);
    natm_host_close(nh, 30000);
}

static double elapsed(void)
{
    struct timeval t1;
    gettimeofday(&t1, NULL);
    return (t1.tv_sec - t0.tv_sec) + (t1.tv_usec - t0.tv_usec) / 1e6;
}

int main(int argc, char **argv)
{
    int c, cnt;
    double real;

    while ((c = getopt(argc, argv, "trsvl:n:p:q:")) != -1) {
        switch (c) {
        case 't': trans = 1; break;
        case 'r': trans = 0; break;
        case 's': sinkmode = 1; break;
        case 'v': verbose = 1; break;
        case 'l': buflen = atoi(optarg); break;
        case 'n': nbuf = atoi(optarg); break;
        case 'p': port = optarg; break;
        case 'q': qos = optarg; break;
        default: fputs(usage, stderr); return 1;
        }
    }
    if (trans < 0 || buflen <= 0 || nbuf <= 0) {
        fputs(usage, stderr);
        return 1;
    }
    if (trans) {
        if (optind == argc) {
            fputs(usage, stderr);
            return 1;
        }
        host = argv[optind];
    }
    if ((buf = malloc(buflen)) == NULL)
        err("malloc");
    if (trans) {
        fprintf(stderr, "ttcp-t: buflen=%d, nbuf=%d, sap=%s natm %s -> %s\n", buflen, nbuf,
                port, qos, host);
    } else {
        fprintf(stderr, "ttcp-r: buflen=%d, nbuf=%d, sap=%s natm %s\n", buflen, nbuf, port,
                qos);
    }
    open_connection();

    gettimeofday(&t0, NULL);
    errno = 0;
    if (sinkmode) {
        if (trans) {
            pattern(buf, buflen);
            while (nbuf-- && Nwrite(conn, buf, buflen) == buflen)
                nbytes += buflen;
        } else {
            while ((cnt = Nread(conn, buf, buflen)) > 0)
                nbytes += cnt;
        }
    } else {
        if (trans) {
            while ((cnt = (int)read(0, buf, buflen)) > 0 && Nwrite(conn, buf, cnt) == cnt)
                nbytes += cnt;
        } else {
            while ((cnt = Nread(conn, buf, buflen)) > 0 && write(1, buf, cnt) == cnt)
                nbytes += cnt;
        }
    }
    if (errno)
        err("IO");
    close_connection();
    real = elapsed();
    if (real <= 0.0)
        real = 0.000001;
    fprintf(stderr, "ttcp%s: %lld bytes in %.2f real seconds = %.2f KB/sec +++\n",
            trans ? "-t" : "-r", nbytes, real, ((double)nbytes) / real / 1024.0);
    if (verbose) {
        fprintf(stderr, "ttcp%s: %ld I/O calls, msec/call = %.2f, calls/sec = %.2f\n",
                trans ? "-t" : "-r", numcalls, 1000.0 * real / ((double)numcalls),
                ((double)numcalls) / real);
    }
    return 0;
}
