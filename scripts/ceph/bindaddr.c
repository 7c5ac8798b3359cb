// bindaddr: an LD_PRELOAD shim that gives a process's loopback TCP
// connections the source address in DROVER_CLIENT_ADDR (e.g. 127.0.2.1).
//
// Ceph clients (librados, librbd, the rbd and rados CLIs) never bind their
// sockets: `public addr` and `ms bind before connect` only take effect for
// the OSD's heartbeat messengers, so on one loopback every client would
// otherwise connect from 127.0.0.1 and a CIDR blocklist entry could not tell
// one site's clients from the other's. With this shim, a client the OSDs and
// mons see as 127.0.2.1:0/NONCE is fenced by `ceph osd blocklist range add
// 127.0.2.0/24`, and one at 127.0.3.1 is not.
//
// Only IPv4 stream sockets that are not bound yet and connect to 127.0.0.0/8
// are touched; everything else (and every process without the variable) is
// left alone. Pure-Go network code makes raw system calls and never sees it.
//
// Build: cc -shared -fPIC -O2 -o bindaddr.so bindaddr.c -ldl
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);

int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	static connect_fn real;
	if (!real) {
		real = (connect_fn)dlsym(RTLD_NEXT, "connect");
		if (!real) {
			errno = ENOSYS;
			return -1;
		}
	}
	const char *want = getenv("DROVER_CLIENT_ADDR");
	if (want && *want && addr && addr->sa_family == AF_INET &&
	    len >= (socklen_t)sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *dst = (const struct sockaddr_in *)addr;
		int type = 0;
		socklen_t tl = sizeof(type);
		struct sockaddr_in cur;
		socklen_t cl = sizeof(cur);
		memset(&cur, 0, sizeof(cur));
		if ((ntohl(dst->sin_addr.s_addr) >> 24) == 127 &&
		    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 &&
		    type == SOCK_STREAM &&
		    getsockname(fd, (struct sockaddr *)&cur, &cl) == 0 &&
		    cur.sin_port == 0 && cur.sin_addr.s_addr == htonl(INADDR_ANY)) {
			// Strict: a client that cannot take its address does not
			// connect at all, rather than connect unfenceable from
			// 127.0.0.1.
			struct sockaddr_in src;
			memset(&src, 0, sizeof(src));
			src.sin_family = AF_INET;
			if (inet_pton(AF_INET, want, &src.sin_addr) != 1) {
				errno = EINVAL;
				return -1;
			}
			if (bind(fd, (struct sockaddr *)&src, sizeof(src)) != 0)
				return -1;
		}
	}
	return real(fd, addr, len);
}
