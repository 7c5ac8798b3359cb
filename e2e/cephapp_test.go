package e2e_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cephApp is the application of the real-Ceph cycle: a writer through
// librbd (Debian's python3-rbd) that writes numbered 4 KiB blocks of
// known content, one at a time, to the plan's images on its site's
// cluster, and appends each write to its log only once librbd has
// acknowledged it (write, then flush). Every block names its writer, its
// sequence number and a checksum, so a later read of the image (rbd
// export) tells which acknowledged writes it holds. Run as
//
//	python3 app.py write CONF CLIENT_ID SITE ACKLOG BASE IMAGE...
//	python3 app.py check CONF CLIENT_ID OUT
//	python3 app.py mark CONF CLIENT_ID IMAGE OFFSET TEXT
//
// An IMAGE may be given as a ceph-csi volume id, whose image it names
// (csi-vol- and the id's UUID): a hook passes the volume a point in time
// restored in place of the plan's (DROVER_VOLUME_*). check reads the
// copies a test recovery names (DROVER_COPY_*) and writes how many of
// their blocks are the writer's, intact, and how many are damage (a
// block mark wrote as "damage"), to OUT; mark writes one block of TEXT
// (a write outside the writer: a split brain, or the damage).
const cephApp = `
import hashlib, os, sys, time
import rados, rbd

BLOCK = 4096

def block(site, image, seq):
    head = ("%s %s %d " % (site, image, seq)).encode()
    body = (head * (BLOCK // len(head) + 1))[: BLOCK - 32]
    return body + hashlib.sha256(body).hexdigest()[:32].encode()

def intact(b):
    return len(b) == BLOCK and hashlib.sha256(b[: BLOCK - 32]).hexdigest()[:32].encode() == b[BLOCK - 32 :]

def connect(conf, cid):
    c = rados.Rados(conffile=conf, rados_id=cid)
    c.conf_set("rados_osd_op_timeout", "5")
    c.conf_set("rados_mon_op_timeout", "5")
    c.conf_set("client_mount_timeout", "5")
    c.connect(timeout=5)
    return c

def image(n):
    return n if n.startswith("csi-vol-") else "csi-vol-" + n[-36:]

def write(conf, cid, site, acklog, base, images):
    images = [image(n) for n in images]
    # A restarted writer goes on after its last acknowledged write, so no
    # block is written twice; each site writes from its own base block.
    seq = 0
    if os.path.exists(acklog):
        for line in open(acklog):
            f = line.split()
            if f and f[0] == "ack":
                seq = int(f[1]) + 1
    log = open(acklog, "a", buffering=1)
    errs = 0
    while True:
        try:
            c = connect(conf, cid)
            io = c.open_ioctx("rbd")
            imgs = [rbd.Image(io, n) for n in images]
            while True:
                i = seq % len(imgs)
                off = (base + seq // len(imgs)) * BLOCK
                imgs[i].write(block(site, images[i], seq), off)
                imgs[i].flush()
                log.write("ack %d %s %d %.6f\n" % (seq, images[i], off, time.time()))
                os.fsync(log.fileno())
                seq += 1
                time.sleep(0.2)
        except Exception as e:
            errs += 1
            log.write("err %d %.6f %s\n" % (seq, time.time(), str(e).replace("\n", " ")[:200]))
            try:
                c.shutdown()
            except Exception:
                pass
            time.sleep(1)

def check(conf, cid, out):
    c = connect(conf, cid)
    io = c.open_ioctx("rbd")
    total = good = damaged = 0
    for k, v in sorted(os.environ.items()):
        if not k.startswith("DROVER_COPY_"):
            continue
        img = rbd.Image(io, "csi-vol-" + v[-36:], read_only=True)
        for off in range(0, min(img.size(), 256 * BLOCK), BLOCK):
            b = img.read(off, BLOCK)
            if b.strip(b"\0"):
                total += 1
                good += intact(b)
                damaged += b.startswith(b"damage")
        img.close()
    open(out, "w").write("%d copies, %d blocks, %d intact, %d damaged\n" % (sum(k.startswith("DROVER_COPY_") for k in os.environ), total, good, damaged))
    sys.exit(0 if total > 0 and good + damaged == total else 1)

def mark(conf, cid, image, off, text):
    c = connect(conf, cid)
    img = rbd.Image(c.open_ioctx("rbd"), image)
    img.write(text.encode().ljust(BLOCK, b"."), int(off))
    img.flush()
    img.close()
    c.shutdown()

if sys.argv[1] == "write":
    write(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]), sys.argv[7:])
elif sys.argv[1] == "mark":
    mark(*sys.argv[2:7])
else:
    check(sys.argv[2], sys.argv[3], sys.argv[4])
`

// cephBlock is the content cephApp writes for site's write seq to image.
func cephBlock(site, image string, seq int) []byte {
	head := []byte(fmt.Sprintf("%s %s %d ", site, image, seq))
	body := bytes.Repeat(head, cephBlockSize/len(head)+1)[:cephBlockSize-32]
	sum := sha256.Sum256(body)
	return append(body, []byte(hex.EncodeToString(sum[:])[:32])...)
}

const cephBlockSize = 4096

// cephAck is one acknowledged write from a writer's log.
type cephAck struct {
	Seq    int
	Image  string
	Offset int64
	At     time.Time
}

// cephAcks reads a writer's log: its acknowledged writes, and how many
// writes failed.
func cephAcks(t *testing.T, path string) (acks []cephAck, errs int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 5 && f[0] == "ack":
			seq, _ := strconv.Atoi(f[1])
			off, _ := strconv.ParseInt(f[3], 10, 64)
			sec, _ := strconv.ParseFloat(f[4], 64)
			acks = append(acks, cephAck{Seq: seq, Image: f[2], Offset: off, At: time.Unix(0, int64(sec*1e9))})
		case len(f) > 0 && f[0] == "err":
			errs++
		}
	}
	return acks, errs
}
