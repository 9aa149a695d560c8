#!/usr/bin/env python3
"""Manual smoke test for the interop peer jar (not run by cargo).

usage: python3 smoke_test.py target/interop-peer-4.7.0.jar [redis_port]

Needs a throwaway redis-server on 127.0.0.1:<redis_port> (default 6399) and
redis-cli on PATH. FLUSHes that server's DB. Exits non-zero on the first failure.
"""
import subprocess
import sys
import threading
import time


class Peer:
    def __init__(self, jar, port, watchdog_ms=None):
        cmd = ["java", "-jar", jar, "--url", f"redis://127.0.0.1:{port}"]
        if watchdog_ms is not None:
            cmd += ["--watchdog-ms", str(watchdog_ms)]
        t0 = time.time()
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, bufsize=1)
        self.ready = self.p.stdout.readline().strip()
        self.startup_s = time.time() - t0
        parts = self.ready.split(" ")
        assert parts[0] == "READY" and len(parts) == 3, f"bad READY line: {self.ready!r}"
        self.client_id, self.version = parts[1], parts[2]
        self.replies = {}
        self.order = []
        self.stray = []
        self.cv = threading.Condition()
        self.n = 0
        threading.Thread(target=self._read, daemon=True).start()
        self.stderr = []
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            line = line.rstrip("\n")
            req, _, rest = line.partition(" ")
            with self.cv:
                if req in self.replies:
                    self.stray.append(line)
                self.replies[req] = rest
                self.order.append(req)
                self.cv.notify_all()

    def _read_err(self):
        for line in self.p.stderr:
            self.stderr.append(line.rstrip("\n"))

    def send(self, cmd):
        self.n += 1
        req = f"r{self.n}"
        self.p.stdin.write(f"{req} {cmd}\n")
        self.p.stdin.flush()
        return req

    def wait(self, req, timeout=10.0):
        end = time.time() + timeout
        with self.cv:
            while req not in self.replies:
                left = end - time.time()
                if left <= 0:
                    raise AssertionError(f"no reply for {req} within {timeout}s")
                self.cv.wait(left)
            return self.replies[req]

    def has(self, req):
        with self.cv:
            return req in self.replies

    def call(self, cmd, timeout=10.0):
        return self.wait(self.send(cmd), timeout)

    def close(self):
        self.p.stdin.close()  # EOF -> shutdown, exit 0
        rc = self.p.wait(20)
        assert not self.stray, f"duplicate replies: {self.stray}"
        return rc


def rcli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True,
                          text=True, check=True).stdout.strip()


def check(cond, what):
    print(("PASS " if cond else "FAIL ") + what, flush=True)
    if not cond:
        sys.exit(1)


def fenced_checks(p, q, port):
    """Fenced lock (Redisson >= 3.19): tokens grow per acquisition; ERR on 3.16.4."""
    if p.version.startswith("3."):
        for cmd in ("fencedLock fl 1 -1", "fencedTryLock fl 1 0 -1", "fencedUnlock fl 1",
                    "fencedToken fl", "fencedContend fl 1 3 tokens"):
            r = p.call(cmd)
            check(r.startswith("ERR UnsupportedOperationException "), f"{cmd} -> {r} (Redisson {p.version})")
        check(rcli(port, "EXISTS", "fl", "tokens") == "0", "nothing written without a fenced lock")
        return
    check(p.call("fencedToken fl") == "OK 0", "fencedToken of a fresh lock -> 0")
    t1 = int(p.call("fencedLock fl 1 -1").split()[1])
    check(rcli(port, "HGETALL", "fl").split("\n") == [f"{p.client_id}:1", "1"], "fenced lock hash field")
    check(rcli(port, "GET", "redisson_lock_token:{fl}") == str(t1), f"token key = {t1}")
    check(p.call("fencedTryLock fl 2 0 -1") == "OK null", "fencedTryLock other tid -> null")
    check(p.call("fencedIsHeldByThread fl 1") == "OK true", "fencedIsHeldByThread fl 1")
    check(p.call("fencedUnlock fl 1") == "OK", "fencedUnlock fl 1")
    t2 = int(p.call("fencedLock fl 1 -1").split()[1])
    check(t2 > t1, f"second fencedLock token {t2} > {t1}")
    check(p.call("fencedToken fl") == f"OK {t2}", "fencedToken = last token")
    blocked = p.send("fencedTryLock fl 3 5000 2000")
    time.sleep(0.3)
    check(not p.has(blocked), "fencedTryLock with wait blocks")
    p.call("fencedUnlock fl 1")
    r = p.wait(blocked, 6)
    check(r.startswith("OK ") and int(r.split()[1]) > t2, f"waiting fencedTryLock -> {r}")
    pttl = int(rcli(port, "PTTL", "fl"))
    check(1000 < pttl <= 2000, f"PTTL fl = {pttl} (lease 2000)")
    check(p.call("fencedForceUnlock fl") == "OK true", "fencedForceUnlock")
    runs = [(p, p.send("fencedContend fc 1 40 tokens")), (p, p.send("fencedContend fc 2 40 tokens")),
            (q, q.send("fencedContend fc 1 40 tokens"))]
    res = [peer.wait(r, 120) for peer, r in runs]
    check(res == ["OK 40"] * 3, f"fencedContend x3 -> {res}")
    toks = [int(t) for t in rcli(port, "LRANGE", "tokens", "0", "-1").split("\n")]
    check(len(toks) == 120 and all(a < b for a, b in zip(toks, toks[1:])),
          f"120 strictly increasing tokens in the list ({toks[:3]}..{toks[-3:]})")


def lock_kind_checks(p, q, port):
    """Spin lock (prefix s) and multi lock (word prefix multi, comma-separated names)."""
    cid = p.client_id
    check(p.call("slock sp 1 -1") == "OK", "slock sp 1")
    check(rcli(port, "HGETALL", "sp").split("\n") == [f"{cid}:1", "1"], "spin lock hash field")
    check(p.call("stryLock sp 2 0 -1") == "OK false", "stryLock other tid -> false")
    check(p.call("sisHeldByThread sp 1") == "OK true", "sisHeldByThread sp 1")
    blocked = p.send("stryLock sp 2 5000 -1")
    time.sleep(0.3)
    check(p.call("sunlock sp 1") == "OK", "sunlock sp 1")
    check(p.wait(blocked, 6) == "OK true", "waiting stryLock acquires after sunlock")
    check(p.call("sforceUnlock sp") == "OK true", "sforceUnlock")
    check(p.call("sisLocked sp") == "OK false", "sisLocked false")
    rcli(port, "DEL", "scounter")
    runs = [(p, p.send("scontend sx 1 50 sinside scounter")), (q, q.send("scontend sx 1 50 sinside scounter"))]
    res = [peer.wait(r, 120) for peer, r in runs]
    check(res == ["OK 0"] * 2, f"scontend x2 -> {res}")
    check(rcli(port, "GET", "scounter") == "100", "scounter = 100")

    check(p.call("multiLock ma,mb 1 -1") == "OK", "multiLock ma,mb 1")
    check(rcli(port, "HGETALL", "mb").split("\n") == [f"{cid}:1", "1"], "multi lock holds plain lock mb")
    check(p.call("tryLock ma 2 0 -1") == "OK false", "plain tryLock ma by another tid -> false")
    check(p.call("tryLock mb 2 0 -1") == "OK false", "plain tryLock mb by another tid -> false")
    check(q.call("tryLock mb 1 0 -1") == "OK false", "plain tryLock mb by another client -> false")
    check(p.call("multiTryLock mb,mc 2 200 -1") == "OK false", "overlapping multiTryLock -> false")
    check(rcli(port, "EXISTS", "mc") == "0", "failed multiTryLock released mc")
    check(p.call("multiUnlock ma,mb 1") == "OK", "multiUnlock ma,mb 1")
    check(rcli(port, "EXISTS", "ma", "mb") == "0", "ma, mb gone")
    check(p.call("lock mb 3 -1") == "OK", "plain lock mb 3")
    blocked = p.send("multiLock ma,mb 4 3000")
    time.sleep(0.5)
    check(not p.has(blocked), "multiLock blocked by the plain lock on mb")
    p.call("unlock mb 3")
    check(p.wait(blocked, 10) == "OK", "multiLock acquires after unlock")
    pttl = int(rcli(port, "PTTL", "ma"))
    check(2000 < pttl <= 3000, f"PTTL ma = {pttl} (lease 3000)")
    check(p.call("multiUnlock ma,mb 4") == "OK", "multiUnlock ma,mb 4")
    # waitTime 0: 3.16.4's RedissonMultiLock fails (redisson#4033), 4.x tries each lock once.
    r = p.call("multiTryLock ma,mb 5 0 -1")
    check(r == ("OK false" if p.version.startswith("3.") else "OK true"),
          f"multiTryLock WAIT 0 on free locks -> {r} (Redisson {p.version})")
    p.call("forceUnlock ma"), p.call("forceUnlock mb")
    r = p.call("multiIsLocked ma,mb")
    check(r == "ERR UnsupportedOperationException -", f"multiIsLocked -> {r}")
    # Same name order in both: opposite orders make RedissonMultiLock back off in ~3 s rounds.
    rcli(port, "DEL", "mcounter")
    runs = [(p, p.send("multiContend mx,my 1 30 minside mcounter")),
            (q, q.send("multiContend mx,my 1 30 minside mcounter"))]
    res = [peer.wait(r, 120) for peer, r in runs]
    check(res == ["OK 0"] * 2, f"multiContend x2 -> {res}")
    check(rcli(port, "GET", "mcounter") == "60", "mcounter = 60")


def semaphore_latch_checks(p, q, port):
    """Semaphore, permit-expirable semaphore and count-down latch."""
    check(p.call("semTrySetPermits sem 2") == "OK true", "semTrySetPermits sem 2")
    check(p.call("semTrySetPermits sem 5") == "OK false", "semTrySetPermits again -> false")
    check(rcli(port, "GET", "sem") == "2", "sem key holds plain 2")
    check(p.call("semAcquire sem 1") == "OK", "semAcquire 1/2")
    check(q.call("semAcquire sem 1") == "OK", "semAcquire 2/2 (other client)")
    check(p.call("semTryAcquire sem 1 0") == "OK false", "third semTryAcquire WAIT 0 -> false")
    blocked = p.send("semAcquire sem 1")
    time.sleep(0.3)
    check(not p.has(blocked), "semAcquire blocks without permits")
    check(q.call("semRelease sem 1") == "OK", "semRelease 1")
    check(p.wait(blocked, 5) == "OK", "blocked semAcquire gets the released permit")
    check(p.call("semRelease sem 2") == "OK", "semRelease 2")
    check(p.call("semAddPermits sem 3") == "OK", "semAddPermits 3")
    check(p.call("semAvailable sem") == "OK 5", "semAvailable 5")
    check(p.call("semDrain sem") == "OK 5", "semDrain -> 5")
    check(p.call("semAvailable sem") == "OK 0", "semAvailable 0 after drain")
    p.call("semTrySetPermits semc 3")
    runs = [(p, p.send("semContend semc 30 seminside semmax")), (p, p.send("semContend semc 30 seminside semmax")),
            (q, q.send("semContend semc 30 seminside semmax")), (q, q.send("semContend semc 30 seminside semmax"))]
    res = [peer.wait(r, 120) for peer, r in runs]
    check(res == ["OK"] * 4, f"semContend x4 -> {res}")
    mx = int(rcli(port, "GET", "semmax"))
    check(1 <= mx <= 3, f"semContend: max inside {mx} <= 3 permits")
    check(rcli(port, "GET", "seminside") == "0" and p.call("semAvailable semc") == "OK 3", "all permits back")

    check(p.call("pesTrySetPermits pes 1") == "OK true", "pesTrySetPermits pes 1")
    pid = p.call("pesAcquire pes -1").split()[1]
    check(len(pid) == 32 and pid != "null", f"pesAcquire -> id {pid}")
    check(q.call("pesTryAcquire pes 0 -1") == "OK null", "pesTryAcquire with no permit -> null")
    blocked = q.send("pesTryAcquire pes 5000 300")
    time.sleep(0.3)
    check(not q.has(blocked), "pesTryAcquire with wait blocks")
    check(q.call(f"pesTryRelease pes {pid}") == "OK true", "pesTryRelease by another client -> true")
    check(p.call(f"pesTryRelease pes {pid}") == "OK false", "pesTryRelease again -> false")
    r = p.call(f"pesRelease pes {pid}")
    check(r.startswith("ERR IllegalArgumentException Permit with id"), f"pesRelease released id -> {r}")
    r = q.wait(blocked, 6)
    check(r.startswith("OK ") and r != "OK null", f"waiting pesTryAcquire -> {r}")
    check(p.call("pesAvailable pes") == "OK 0", "pesAvailable 0 while leased")
    time.sleep(0.6)
    check(p.call("pesAvailable pes") == "OK 1", "lease 300 expired -> pesAvailable 1")
    pid = p.call("pesAcquire pes 5000").split()[1]
    check(p.call(f"pesRelease pes {pid}") == "OK", "pesRelease OK")

    check(p.call("latchTrySetCount latch 2") == "OK true", "latchTrySetCount 2")
    check(p.call("latchTrySetCount latch 5") == "OK false", "latchTrySetCount again -> false")
    check(p.call("latchCount latch") == "OK 2", "latchCount 2")
    check(p.call("latchAwait latch 100") == "OK false", "latchAwait 100 times out")
    waiters = [(p, p.send("latchAwait latch -1")), (q, q.send("latchAwait latch 10000"))]
    check(q.call("latchCountDown latch") == "OK", "latchCountDown 1/2")
    time.sleep(0.3)
    check(not any(peer.has(r) for peer, r in waiters), "latch still closed after one countDown")
    check(p.call("latchCountDown latch") == "OK", "latchCountDown 2/2")
    res = [peer.wait(r, 5) for peer, r in waiters]
    check(res == ["OK true"] * 2, f"latchAwait -1 / 10000 open -> {res}")
    check(p.call("latchCount latch") == "OK 0", "latchCount 0")
    check(p.call("latchDelete latch") == "OK false", "latchDelete after zero -> false (already gone)")
    check(p.call("latchTrySetCount latch 1") == "OK true", "latchTrySetCount 1")
    check(p.call("latchDelete latch") == "OK true", "latchDelete -> true")
    r = p.call("semAcquire sem")
    check(r == "ERR IllegalArgumentException usage: semAcquire NAME n", f"semAcquire bad arity -> {r}")


def main():
    jar = sys.argv[1]
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 6399
    rcli(port, "FLUSHDB")

    p = Peer(jar, port)
    print(f"READY line: {p.ready} (startup {p.startup_s:.2f}s)")
    cid = p.client_id
    check(p.call("getId") == f"OK {cid}", "getId")

    check(p.call("lock a 1 -1") == "OK", "lock a 1 -1")
    h = rcli(port, "HGETALL", "a").split("\n")
    check(h == [f"{cid}:1", "1"], f"HGETALL a = {h}")
    pttl = int(rcli(port, "PTTL", "a"))
    check(25_000 < pttl <= 30_000, f"PTTL a = {pttl} (watchdog 30000)")
    check(p.call("lock a 1 -1") == "OK", "re-enter lock a 1 -1")
    check(p.call("holdCount a 1") == "OK 2", "holdCount 2")
    check(p.call("holdCount a 2") == "OK 0", "holdCount other tid 0")
    check(p.call("isHeldByThread a 1") == "OK true", "isHeldByThread a 1")
    check(p.call("isHeldByThread a 2") == "OK false", "isHeldByThread a 2")
    check(p.call("isLocked a") == "OK true", "isLocked")
    t0 = time.time()
    r = p.call("tryLock a 2 100 -1")
    check(r == "OK false", f"tryLock a 2 100 -1 -> {r} in {time.time() - t0:.2f}s")
    rtl = int(p.call("remainTimeToLive a").split()[1])
    check(0 < rtl <= 30_000, f"remainTimeToLive {rtl}")
    check(p.call("unlock a 1") == "OK", "unlock 1/2")
    check(rcli(port, "EXISTS", "a") == "1", "still held after 1 unlock")
    check(p.call("unlock a 1") == "OK", "unlock 2/2")
    check(rcli(port, "EXISTS", "a") == "0", "key gone")
    check(p.call("remainTimeToLive a") == "OK -2", "remainTimeToLive absent -2")
    r = p.call("unlock a 1")
    check(r.startswith("ERR IllegalMonitorStateException "), f"unlock not held -> {r}")
    check(p.call("holdCount a 1") == "OK 0", "holdCount absent")

    check(p.call("lock f 7 -1") == "OK", "lock f 7")
    check(p.call("forceUnlock f") == "OK true", "forceUnlock f -> true")
    check(p.call("forceUnlock f") == "OK false", "forceUnlock f again -> false")
    check(p.call("isLocked f") == "OK false", "isLocked f false")

    # Lease-based lock
    check(p.call("lock l 1 5000") == "OK", "lock with lease 5000")
    pttl = int(rcli(port, "PTTL", "l"))
    check(4000 < pttl <= 5000, f"PTTL l = {pttl}")
    check(p.call("tryLock l 2 0 1000") == "OK false", "tryLock other tid no wait")
    check(p.call("tryLock l 1 0 1000") == "OK true", "tryLock re-entrant")
    p.call("forceUnlock l")

    # Blocking lock answered after holder unlocks, other requests meanwhile.
    check(p.call("lock b 1 -1") == "OK", "lock b 1")
    blocked = p.send("lock b 2 -1")
    time.sleep(0.5)
    check(not p.has(blocked), "lock b 2 is blocked")
    check(p.call("isLocked b") == "OK true", "other request answered while blocked")
    check(p.call("isHeldByThread b 2") == "OK false", "tid 2 does not hold yet")
    check(p.call("unlock b 1") == "OK", "unlock b 1")
    t0 = time.time()
    check(p.wait(blocked, 5) == "OK", f"blocked lock acquired {time.time() - t0:.2f}s after unlock")
    check(p.call("isHeldByThread b 2") == "OK true", "tid 2 holds b")
    check(p.call("unlock b 2") == "OK", "unlock b 2")

    # Blocking tryLock with wait that succeeds when released
    check(p.call("lock w 1 -1") == "OK", "lock w 1")
    tl = p.send("tryLock w 2 5000 -1")
    time.sleep(0.3)
    p.call("unlock w 1")
    check(p.wait(tl, 6) == "OK true", "tryLock with wait acquires after release")
    p.call("unlock w 2")

    # Errors
    check(p.call("frobnicate x") == "ERR IllegalArgumentException unknown command", "unknown command")
    r = p.call("lock a notanumber -1")
    check(r.startswith("ERR NumberFormatException"), f"bad number -> {r}")
    r = p.call("lock a")
    check(r.startswith("ERR IllegalArgumentException usage:"), f"bad arity -> {r}")

    # contend: mutual exclusion + plain string values
    t0 = time.time()
    r = p.call("contend x 1 200 inside counter", 120)
    check(r == "OK 0", f"contend 200 -> {r} in {time.time() - t0:.2f}s")
    check(rcli(port, "GET", "counter") == "200", "counter = 200 (plain string)")
    check(rcli(port, "GET", "inside") == "0", "inside = 0 (plain string)")
    check(rcli(port, "TYPE", "counter") == "string", "counter is a string")
    check(rcli(port, "INCR", "inside") == "1", "raw INCR on inside works")
    rcli(port, "DECR", "inside")

    # Two concurrent contend requests in one peer (different tids), then check counter.
    rcli(port, "DEL", "counter")
    a = p.send("contend x 11 100 inside counter")
    b = p.send("contend x 12 100 inside counter")
    ra, rb = p.wait(a, 120), p.wait(b, 120)
    check(ra == "OK 0" and rb == "OK 0", f"concurrent contend -> {ra}, {rb}")
    check(rcli(port, "GET", "counter") == "200", "counter = 200 after 2x100")

    # Read-write lock (prefixes r / w): readers share, a writer waits for the last reader.
    check(p.call("rlock rw 1 -1") == "OK", "rlock rw 1")
    check(p.call("rlock rw 2 -1") == "OK", "rlock rw 2 (readers share)")
    h = rcli(port, "HGETALL", "rw").split("\n")
    check(h[:2] == ["mode", "read"] and f"{cid}:1" in h and f"{cid}:2" in h, f"HGETALL rw = {h}")
    check(p.call("risLocked rw") == "OK true", "risLocked rw")
    check(p.call("wisLocked rw") == "OK false", "wisLocked rw (read mode)")
    check(p.call("risHeldByThread rw 2") == "OK true", "risHeldByThread rw 2")
    check(p.call("risHeldByThread rw 3") == "OK false", "risHeldByThread rw 3")
    check(p.call("wtryLock rw 3 0 -1") == "OK false", "wtryLock rw 3 0 -1 while read-locked")
    check(p.call("wforceUnlock rw") == "OK false", "wforceUnlock in read mode -> false")
    check(p.call("runlock rw 1") == "OK", "runlock rw 1")
    blocked = p.send("wlock rw 3 -1")
    time.sleep(0.3)
    check(not p.has(blocked), "wlock rw 3 blocked by reader 2")
    check(p.call("runlock rw 2") == "OK", "runlock rw 2")
    check(p.wait(blocked, 5) == "OK", "writer acquires after the last reader")
    h = rcli(port, "HGETALL", "rw").split("\n")
    check(h == ["mode", "write", f"{cid}:3:write", "1"], f"HGETALL rw = {h}")
    check(p.call("rtryLock rw 4 0 -1") == "OK false", "rtryLock rw 4 while write-locked")
    check(p.call("wisHeldByThread rw 3") == "OK true", "wisHeldByThread rw 3")
    r = p.call("runlock rw 3")
    check(r.startswith("ERR IllegalMonitorStateException "), f"runlock by the writer -> {r}")
    check(p.call("wunlock rw 3") == "OK", "wunlock rw 3")
    check(rcli(port, "EXISTS", "rw") == "0", "rw gone")
    # Unlocking an absent read/write lock: 3.16.4's scripts return 1 (OK), 4.x raise.
    r = p.call("wunlock rw 3")
    want = "OK" if p.version.startswith("3.") else "ERR IllegalMonitorStateException "
    check(r.startswith(want), f"wunlock absent rw -> {r} (Redisson {p.version})")
    check(p.call("wlock rw 5 2000") == "OK", "wlock rw lease 2000")
    pttl = int(rcli(port, "PTTL", "rw"))
    check(1000 < pttl <= 2000, f"PTTL rw = {pttl}")
    check(p.call("rforceUnlock rw") == "OK false", "rforceUnlock in write mode -> false")
    check(p.call("wforceUnlock rw") == "OK true", "wforceUnlock -> true")
    r = p.call("rlock rw")
    check(r == "ERR IllegalArgumentException usage: rlock NAME tid LEASE", f"rlock bad arity -> {r}")
    check(p.call("xlock rw 1 -1") == "ERR IllegalArgumentException unknown command", "unknown prefix")

    # Fair lock (prefix f): exclusion, FIFO hand-off, lease, forceUnlock.
    check(p.call("flock fair 1 -1") == "OK", "flock fair 1")
    check(rcli(port, "HGETALL", "fair").split("\n") == [f"{cid}:1", "1"], "fair lock hash field")
    check(p.call("ftryLock fair 2 0 -1") == "OK false", "ftryLock fair 2 0 -1 -> false")
    check(p.call("fisLocked fair") == "OK true", "fisLocked fair")
    check(p.call("fisHeldByThread fair 1") == "OK true", "fisHeldByThread fair 1")
    second = p.send("flock fair 2 -1")
    time.sleep(0.3)
    third = p.send("flock fair 3 -1")
    time.sleep(0.3)
    q_ = rcli(port, "LRANGE", "redisson_lock_queue:{fair}", "0", "-1").split("\n")
    check(q_ == [f"{cid}:2", f"{cid}:3"], f"fair queue = {q_}")
    check(p.call("funlock fair 1") == "OK", "funlock fair 1")
    check(p.wait(second, 5) == "OK", "first waiter (tid 2) acquires")
    time.sleep(0.3)
    check(not p.has(third), "second waiter (tid 3) still queued")
    r = p.call("funlock fair 3")
    check(r.startswith("ERR IllegalMonitorStateException "), f"funlock by a waiter -> {r}")
    check(p.call("funlock fair 2") == "OK", "funlock fair 2")
    check(p.wait(third, 5) == "OK", "tid 3 acquires")
    check(p.call("funlock fair 3") == "OK", "funlock fair 3")
    check(p.call("fisLocked fair") == "OK false", "fisLocked fair false")
    check(p.call("flock fair 4 2000") == "OK", "flock fair lease 2000")
    pttl = int(rcli(port, "PTTL", "fair"))
    check(1000 < pttl <= 2000, f"PTTL fair = {pttl}")
    check(p.call("fforceUnlock fair") == "OK true", "fforceUnlock -> true")
    check(p.call("fforceUnlock fair") == "OK false", "fforceUnlock again -> false")
    rcli(port, "DEL", "fcounter")
    a = p.send("fcontend fx 1 100 finside fcounter")
    b = p.send("fcontend fx 2 100 finside fcounter")
    ra, rb = p.wait(a, 120), p.wait(b, 120)
    check(ra == "OK 0" and rb == "OK 0", f"concurrent fcontend -> {ra}, {rb}")
    check(rcli(port, "GET", "fcounter") == "200", "fcounter = 200 after 2x100")
    check(rcli(port, "GET", "finside") == "0", "finside = 0")

    # Peer-to-peer: second JVM client, lock visible across clients.
    q = Peer(jar, port)
    check(q.client_id != cid, "second peer has its own client id")
    check(p.call("lock pp 1 -1") == "OK", "peer1 lock pp")
    check(q.call("tryLock pp 1 100 -1") == "OK false", "peer2 same tid, other client -> false")
    r = q.call("unlock pp 1")
    check(r.startswith("ERR IllegalMonitorStateException"), f"peer2 unlock -> {r}")
    blocked = q.send("lock pp 1 -1")
    time.sleep(0.3)
    check(not q.has(blocked), "peer2 blocked")
    p.call("unlock pp 1")
    check(q.wait(blocked, 5) == "OK", "peer2 acquires via pubsub")
    q.call("unlock pp 1")
    # rwcontend across both clients (same tid in both, another tid in peer 1).
    rcli(port, "DEL", "writers", "readers")
    runs = [p.send("rwcontend rwc 21 100 4 writers readers"),
            p.send("rwcontend rwc 22 100 3 writers readers")]
    qrun = q.send("rwcontend rwc 21 100 5 writers readers")
    res = [p.wait(r, 120) for r in runs] + [q.wait(qrun, 120)]
    check(res == ["OK 0"] * 3, f"rwcontend x3 -> {res}")
    for key in ("writers", "readers"):
        check(rcli(port, "GET", key) == "0" and rcli(port, "TYPE", key) == "string",
              f"{key} = 0 (plain string)")
    check(rcli(port, "INCR", "readers") == "1", "raw INCR on readers works")
    rcli(port, "DECR", "readers")
    fenced_checks(p, q, port)
    lock_kind_checks(p, q, port)
    semaphore_latch_checks(p, q, port)
    check(q.call("quit") == "OK", "quit -> OK")
    check(q.p.wait(20) == 0, "quit exits 0")

    rc = p.close()
    check(rc == 0, f"EOF exits 0 (rc={rc})")
    if p.stderr:
        print("stderr of peer 1:\n  " + "\n  ".join(p.stderr[:40]))

    # Watchdog renewal with a short timeout.
    rcli(port, "DEL", "wd")
    p = Peer(jar, port, watchdog_ms=1000)
    check(p.call("lock wd 1 -1") == "OK", "lock wd with --watchdog-ms 1000")
    pttl = int(rcli(port, "PTTL", "wd"))
    check(0 < pttl <= 1000, f"PTTL wd = {pttl}")
    time.sleep(4)
    pttl = int(rcli(port, "PTTL", "wd"))
    check(rcli(port, "EXISTS", "wd") == "1" and pttl > 0, f"wd still held after 4s (PTTL {pttl})")
    check(p.call("unlock wd 1") == "OK", "unlock wd")
    # Lease shorter than watchdog expires without renewal.
    check(p.call("lock le 1 500") == "OK", "lock le lease 500")
    time.sleep(1.0)
    check(rcli(port, "EXISTS", "le") == "0", "lease 500 expired")
    # Held lock is left to expire when the peer exits (watchdog stops).
    check(p.call("lock dead 1 -1") == "OK", "lock dead 1")
    check(p.close() == 0, "exit 0")
    check(rcli(port, "EXISTS", "dead") == "1", "lock survives peer exit")
    time.sleep(1.5)
    check(rcli(port, "EXISTS", "dead") == "0", "lock expires after watchdog timeout without peer")
    if p.stderr:
        print("stderr of peer 3:\n  " + "\n  ".join(p.stderr[:40]))
    print(f"ALL PASSED for {jar} (Redisson {p.version})")


if __name__ == "__main__":
    main()
