/*
 * ttcp.c: test TCP throughput between two hosts, BSD sockets.
 *
 * Written for natm after the command line and report of ttcp, the classic
 * public-domain benchmark by Mike Muuss and T.C. Slattery (BRL, 1984-85):
 * the same options and the same "ttcp-t:"/"ttcp-r:" lines, so that results
 * and scripts carry over. It is the "before" of examples/c/ttcp_natm.c; the
 * diff between the two is the port (docs/capi.md).
 *
 * Usage: ttcp -t [-options] host [< in]
 *        ttcp -r [-options] [> out]
 *  -l ##  length of the buffers written or read (default 8192)
 *  -n ##  number of buffers to send with -s (default 2048)
 *  -p ##  port number to send to or listen at (default 5001)
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
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

static int trans = -1;          /* 1 = transmit, 0 = receive */
static int sinkmode;            /* -s */
static int verbose;             /* -v */
static int buflen = 8 * 1024;   /* -l */
static int nbuf = 2 * 1024;     /* -n */
static const char *port = "5001"; /* -p */
static const char *host;        /* -t: where to */
static char *buf;
static long long nbytes;        /* bytes moved */
static long numcalls;           /* I/O calls made */
static int fd = -1;             /* the connection */
static struct timeval t0;

static const char usage[] =
    "Usage: ttcp -t [-options] host [ < in ]\n"
    "       ttcp -r [-options] [ > out ]\n"
    "Options:\n"
    "  -l ##  length of bufs read from or written to network (default 8192)\n"
    "  -n ##  number of source bufs written to network with -s (default 2048)\n"
    "  -p ##  port number to send to or listen at (default 5001)\n"
    "  -s     -t: source a pattern to network; -r: sink (discard) all data\n"
    "  -v     verbose: print more statistics\n";

static void err(const char *s)
{
    fprintf(stderr, "ttcp%s: %s: %s\n", trans ? "-t" : "-r", s, strerror(errno));
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

/* Write all of buf: a stream socket may take less than asked. */
static int Nwrite(int d, const char *b, int count)
{
    int done = 0;
    numcalls++;
    while (done < count) {
        ssize_t n = write(d, b + done, count - done);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        done += (int)n;
    }
    return done;
}

static int Nread(int d, char *b, int count)
{
    ssize_t n;
    numcalls++;
    do
        n = read(d, b, count);
    while (n < 0 && errno == EINTR);
    return (int)n;
}

static void open_connection(void)
{
    struct addrinfo hints, *ai;
    int rc, one = 1;

    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (trans) {
        hints.ai_flags = 0;
        if ((rc = getaddrinfo(host, port, &hints, &ai)) != 0) {
            fprintf(stderr, "ttcp-t: %s: %s\n", host, gai_strerror(rc));
            exit(1);
        }
        if ((fd = socket(ai->ai_family, ai->ai_socktype, 0)) < 0)
            err("socket");
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0)
            err("connect");
        freeaddrinfo(ai);
        mes("connect");
    } else {
        int lfd;
        hints.ai_flags = AI_PASSIVE;
        if ((rc = getaddrinfo(NULL, port, &hints, &ai)) != 0) {
            fprintf(stderr, "ttcp-r: %s\n", gai_strerror(rc));
            exit(1);
        }
        if ((lfd = socket(ai->ai_family, ai->ai_socktype, 0)) < 0)
            err("socket");
        setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(lfd, ai->ai_addr, ai->ai_addrlen) < 0)
            err("bind");
        freeaddrinfo(ai);
        if (listen(lfd, 1) < 0)
            err("listen");
        if ((fd = accept(lfd, NULL, NULL)) < 0)
            err("accept");
        close(lfd);
        mes("accept");
    }
}

static void close_connection(void)
{
    close(fd);
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

    while ((c = getopt(argc, argv, "trsvl:n:p:")) != -1) {
        switch (c) {
        case 't': trans = 1; break;
        case 'r': trans = 0; break;
        case 's': sinkmode = 1; break;
        case 'v': verbose = 1; break;
        case 'l': buflen = atoi(optarg); break;
        case 'n': nbuf = atoi(optarg); break;
        case 'p': port = optarg; break;
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
        fprintf(stderr, "ttcp-t: buflen=%d, nbuf=%d, port=%s tcp -> %s\n", buflen, nbuf,
                port, host);
    } else {
        fprintf(stderr, "ttcp-r: buflen=%d, nbuf=%d, port=%s tcp\n", buflen, nbuf, port);
    }
    open_connection();

    gettimeofday(&t0, NULL);
    errno = 0;
    if (sinkmode) {
        if (trans) {
            pattern(buf, buflen);
            while (nbuf-- && Nwrite(fd, buf, buflen) == buflen)
                nbytes += buflen;
        } else {
            while ((cnt = Nread(fd, buf, buflen)) > 0)
                nbytes += cnt;
        }
    } else {
        if (trans) {
            while ((cnt = (int)read(0, buf, buflen)) > 0 && Nwrite(fd, buf, cnt) == cnt)
                nbytes += cnt;
        } else {
            while ((cnt = Nread(fd, buf, buflen)) > 0 && write(1, buf, cnt) == cnt)
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
