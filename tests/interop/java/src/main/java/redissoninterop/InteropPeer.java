package redissoninterop;

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.Properties;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.redisson.Redisson;
import org.redisson.api.RAtomicLong;
import org.redisson.api.RBucket;
import org.redisson.api.RCountDownLatch;
import org.redisson.api.RList;
import org.redisson.api.RLock;
import org.redisson.api.RMap;
import org.redisson.api.RPermitExpirableSemaphore;
import org.redisson.api.RSemaphore;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;
import org.redisson.config.Config;

/**
 * A controllable JVM Redisson peer for the redisson-lock Rust interop tests.
 *
 * <p>Usage: {@code java -jar interop-peer-X.jar --url redis://127.0.0.1:PORT [--watchdog-ms N]}
 *
 * <p>Prints {@code READY <clientId> <redissonVersion>} once connected, then reads one
 * request per stdin line ({@code <reqId> <command> <args...>}) and answers each with exactly
 * one stdout line ({@code <reqId> OK [value]} or {@code <reqId> ERR <SimpleClassName> <message>}).
 * Requests run concurrently on a thread pool, so a blocking {@code lock} does not hold up later
 * requests. EOF on stdin or {@code quit} shuts the Redisson client down and exits 0.
 *
 * <p>Only API present in both Redisson 3.16.4 and 4.x is used; the project is compiled
 * against both (Maven profiles redisson-3 / redisson-4). The exceptions are called
 * reflectively and answer UnsupportedOperationException where Redisson lacks them: the fenced
 * lock (>= 3.19), the group multi lock (>= 3.38), getLeaseTime (>= 3.41) and the
 * non-reentrant locks (>= 4.4).
 */
public final class InteropPeer {

    private static final Object OUT_LOCK = new Object();
    /** The real stdout; System.out is redirected to stderr so libraries cannot corrupt it. */
    private static PrintStream protocolOut;

    private final RedissonClient redisson;
    private final String clientId;
    /** This peer's client registry entry, once registered. */
    private RedissonLockRegistrar registrar;

    private InteropPeer(RedissonClient redisson) {
        this.redisson = redisson;
        this.clientId = redisson.getId();
    }

    public static void main(String[] args) {
        protocolOut = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
        // Anything a library prints with System.out goes to stderr instead.
        System.setOut(System.err);

        String url = null;
        boolean cluster = false;
        String sentinelMaster = null;
        long watchdogMs = 30_000L;
        long fairWaitMs = -1L;
        String codec = null;
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            try {
                switch (a) {
                    case "--url":
                        url = args[++i];
                        break;
                    case "--cluster":
                        cluster = true;
                        break;
                    case "--sentinel":
                        sentinelMaster = args[++i];
                        break;
                    case "--watchdog-ms":
                        watchdogMs = Long.parseLong(args[++i]);
                        break;
                    case "--fair-wait-ms":
                        fairWaitMs = Long.parseLong(args[++i]);
                        break;
                    case "--codec":
                        codec = args[++i];
                        break;
                    case "--help":
                    case "-h":
                        usage(null);
                        System.exit(0);
                        return;
                    default:
                        usage("unknown argument: " + a);
                        System.exit(2);
                        return;
                }
            } catch (ArrayIndexOutOfBoundsException | NumberFormatException e) {
                usage("bad or missing value for " + a);
                System.exit(2);
                return;
            }
        }
        if (url == null) {
            usage("--url is required");
            System.exit(2);
            return;
        }

        RedissonClient client;
        try {
            Config config = new Config();
            config.setLockWatchdogTimeout(watchdogMs);
            if (codec != null) {
                // The client's default codec: what a group multi lock encodes its values with.
                switch (codec) {
                    case "string":
                        config.setCodec(StringCodec.INSTANCE);
                        break;
                    case "default":
                        break;
                    default:
                        usage("unknown codec " + codec + " (string or default)");
                        System.exit(2);
                        return;
                }
            }
            if (fairWaitMs >= 0) {
                // fairLockWaitTimeout (Redisson >= 3.46), set reflectively so the
                // peer still compiles against 3.16.4.
                Config.class.getMethod("setFairLockWaitTimeout", long.class).invoke(config, fairWaitMs);
            }
            if (cluster) {
                // --url is a comma-separated list of node addresses.
                config.useClusterServers().addNodeAddress(url.split(","));
            } else if (sentinelMaster != null) {
                // --url is a comma-separated list of sentinel addresses.
                config.useSentinelServers().setMasterName(sentinelMaster)
                        .addSentinelAddress(url.split(","));
            } else {
                config.useSingleServer().setAddress(url);
            }
            client = Redisson.create(config);
        } catch (Throwable t) {
            System.err.println("interop-peer: failed to start Redisson client for " + url + ": " + t);
            t.printStackTrace(System.err);
            System.exit(1);
            return;
        }

        InteropPeer peer = new InteropPeer(client);
        send("READY " + peer.clientId + " " + redissonVersion());
        int rc = peer.serve();
        exit(client, rc);
    }

    private static void usage(String error) {
        if (error != null) {
            System.err.println("interop-peer: " + error);
        }
        System.err.println("usage: java -jar interop-peer-X.jar --url redis://HOST:PORT[,redis://HOST:PORT...] [--cluster | --sentinel MASTER] [--watchdog-ms N] [--fair-wait-ms N] [--codec string|default]");
    }

    private static String redissonVersion() {
        try (InputStream in = InteropPeer.class.getResourceAsStream("/interop-peer.properties")) {
            if (in != null) {
                Properties p = new Properties();
                p.load(in);
                String v = p.getProperty("redisson.version");
                if (v != null && !v.isBlank() && !v.startsWith("${")) {
                    return v.trim();
                }
            }
        } catch (Exception ignored) {
            // fall through
        }
        return "unknown";
    }

    /** Reads requests until EOF or quit; returns the process exit code. */
    private int serve() {
        AtomicInteger threadNo = new AtomicInteger();
        ExecutorService pool = Executors.newCachedThreadPool(r -> {
            Thread t = new Thread(r, "interop-req-" + threadNo.incrementAndGet());
            t.setDaemon(true);
            return t;
        });
        try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            String line;
            while ((line = in.readLine()) != null) {
                line = line.strip();
                if (line.isEmpty()) {
                    continue;
                }
                String[] parts = line.split("\\s+");
                String reqId = parts[0];
                if (parts.length >= 2 && parts[1].equals("quit")) {
                    send(reqId + " OK");
                    return 0;
                }
                pool.execute(() -> handle(reqId, parts));
            }
            return 0; // EOF
        } catch (Throwable t) {
            System.err.println("interop-peer: stdin failed: " + t);
            return 1;
        }
    }

    private static void exit(RedissonClient client, int rc) {
        // Never hang on shutdown: halt after 10 s whatever happens.
        Thread killer = new Thread(() -> {
            try {
                Thread.sleep(10_000);
            } catch (InterruptedException ignored) {
                return;
            }
            System.err.println("interop-peer: shutdown timed out, halting");
            Runtime.getRuntime().halt(rc);
        }, "interop-shutdown-guard");
        killer.setDaemon(true);
        killer.start();
        try {
            client.shutdown(0, 2, TimeUnit.SECONDS);
        } catch (Throwable t) {
            System.err.println("interop-peer: shutdown error: " + t);
        }
        protocolOut.flush();
        System.exit(rc);
    }

    static void send(String line) {
        synchronized (OUT_LOCK) {
            protocolOut.print(line);
            protocolOut.print('\n');
            protocolOut.flush();
        }
    }

    private void handle(String reqId, String[] parts) {
        String reply;
        try {
            if (parts.length < 2) {
                throw new IllegalArgumentException("missing command");
            }
            String value = execute(parts[1], parts);
            reply = value == null ? reqId + " OK" : reqId + " OK " + value;
        } catch (Throwable t) {
            Throwable root = unwrap(t);
            String msg = root.getMessage();
            if (msg == null || msg.isBlank()) {
                msg = "-";
            } else {
                msg = msg.replaceAll("[\\r\\n]+", " ").strip();
            }
            reply = reqId + " ERR " + root.getClass().getSimpleName() + " " + msg;
        }
        send(reply);
    }

    /** Strips CompletionException / ExecutionException (and reflection) wrappers. */
    static Throwable unwrap(Throwable t) {
        Throwable cur = t;
        while ((cur instanceof CompletionException
                || cur instanceof ExecutionException
                || cur instanceof InvocationTargetException)
                && cur.getCause() != null && cur.getCause() != cur) {
            cur = cur.getCause();
        }
        return cur;
    }

    private static void need(String[] parts, int args, String usage) {
        if (parts.length != args + 2) {
            throw new IllegalArgumentException("usage: " + usage);
        }
    }

    /** Runs one command; returns the OK value (null for a bare OK). */
    private String execute(String cmd, String[] p) throws Exception {
        switch (cmd) {
            case "holdCount": {
                need(p, 2, "holdCount NAME tid");
                long tid = Long.parseLong(p[3]);
                // RLock.getHoldCount() is bound to the calling thread; read the hash field
                // "<clientId>:<tid>" directly instead (HGET NAME field).
                RMap<String, String> map = redisson.getMap(p[2], StringCodec.INSTANCE);
                String v = map.get(clientId + ":" + tid);
                return v == null ? "0" : v;
            }
            case "fields": {
                need(p, 1, "fields NAME");
                // Every field of the lock hash and its hold count, as Redisson reads
                // them: "field=count" pairs, sorted, comma-separated.
                RMap<String, String> map = redisson.getMap(p[2], StringCodec.INSTANCE);
                java.util.TreeMap<String, String> sorted = new java.util.TreeMap<>(map.readAllMap());
                StringBuilder out = new StringBuilder();
                for (java.util.Map.Entry<String, String> e : sorted.entrySet()) {
                    if (out.length() > 0) out.append(',');
                    out.append(e.getKey()).append('=').append(e.getValue());
                }
                return out.toString();
            }
            case "remainTimeToLive": {
                need(p, 1, "remainTimeToLive NAME");
                return String.valueOf(redisson.getLock(p[2]).remainTimeToLive());
            }
            case "register": {
                if (p.length < 3) {
                    throw new IllegalArgumentException(
                            "usage: register SERVICE [INSTANCE|- [TTL_MS [KEY=VALUE ...]]]");
                }
                // The client registry entry, written and kept alive by the registrar that
                // docs/interop.md ships (the same on every version).
                String instance = p.length > 3 && !p[3].equals("-") ? p[3] : null;
                long ttl = p.length > 4 ? Long.parseLong(p[4]) : 30_000;
                java.util.Map<String, String> labels = new java.util.TreeMap<>();
                for (int i = 5; i < p.length; i++) {
                    String[] kv = p[i].split("=", 2);
                    labels.put(kv[0], kv.length > 1 ? kv[1] : "");
                }
                if (registrar != null) {
                    registrar.close();
                }
                registrar = new RedissonLockRegistrar(redisson, p[2], instance, labels, ttl);
                return null;
            }
            case "unregister": {
                need(p, 0, "unregister");
                if (registrar != null) {
                    registrar.close();
                    registrar = null;
                }
                return null;
            }
            case "getId": {
                need(p, 0, "getId");
                return clientId;
            }
            case "wakeListeners": {
                need(p, 0, "wakeListeners");
                return wakeListeners();
            }
            case "contend":
            case "fcontend":
            case "scontend":
            case "multiContend": {
                need(p, 5, cmd + " NAME tid ITER INSIDE_KEY COUNTER_KEY");
                RLock lock = lockFor(CONTEND_KINDS.get(cmd), p[2]);
                return String.valueOf(contend(lock, Long.parseLong(p[3]), Long.parseLong(p[4]), p[5], p[6]));
            }
            case "fencedLock":
            case "fencedTryLock": {
                // lock / tryLock answering the fencing token (the other fenced* lock commands
                // are plain LOCK_COMMANDS); "null" when tryLock gives up.
                String op = cmd.equals("fencedLock") ? "lock" : "tryLock";
                needLockArgs(cmd, op, p);
                long wait = op.equals("lock") ? -1 : Long.parseLong(p[4]);
                Long token = lockAndGetToken(lockFor("fenced", p[2]), Long.parseLong(p[3]), wait,
                        Long.parseLong(p[p.length - 1]));
                return String.valueOf(token);
            }
            case "safety": {
                need(p, 4, "safety PREFIX LOCKS THREADS RESOURCE_URL");
                return safety(p[2], Integer.parseInt(p[3]), Integer.parseInt(p[4]), p[5]);
            }
            case "fencedToken": {
                need(p, 1, "fencedToken NAME");
                return String.valueOf(fenced(FENCED_GET_TOKEN, lockFor("fenced", p[2])));
            }
            case "fencedContend": {
                need(p, 4, "fencedContend NAME tid ITER TOKENS_KEY");
                return String.valueOf(fencedContend(lockFor("fenced", p[2]), Long.parseLong(p[3]),
                        Long.parseLong(p[4]), p[5]));
            }
            case "rwcontend": {
                need(p, 6, "rwcontend NAME tid ITER WRITE_EVERY WRITERS_KEY READERS_KEY");
                return String.valueOf(rwcontend(p[2], Long.parseLong(p[3]), Long.parseLong(p[4]),
                        Long.parseLong(p[5]), p[6], p[7]));
            }
            case "handoff": {
                if (p.length != 5 && p.length != 6) {
                    throw new IllegalArgumentException("usage: handoff NAME WAITERS DEADLINE_UNIX_MS [KIND_PREFIX]");
                }
                String prefix = p.length == 6 ? p[5] : "";
                if (!LOCK_KINDS.contains(prefix)) {
                    throw new IllegalArgumentException("unknown lock kind prefix " + prefix);
                }
                return handoff(lockFor(prefix, p[2]), Integer.parseInt(p[3]), Long.parseLong(p[4]));
            }
            case "bench": {
                need(p, 3, "bench PREFIX CONCURRENCY DURATION_MS");
                return bench(p[2], Integer.parseInt(p[3]), Long.parseLong(p[4]));
            }
            default: {
                // lock / tryLock / unlock / forceUnlock / isLocked / isHeldByThread, with an
                // optional lock-kind prefix (see lockFor): "rlock", "wtryLock", "funlock",
                // "sisLocked", "fencedUnlock", "multiTryLock", ...
                String[] kindOp = LOCK_COMMANDS.get(cmd);
                if (kindOp != null) {
                    return lockOp(cmd, kindOp[0], kindOp[1], p);
                }
                // semaphore / permit-expirable semaphore / count-down latch commands
                if (SYNC_OPS.containsKey(cmd)) {
                    return syncOp(cmd, p);
                }
                throw new IllegalArgumentException("unknown command");
            }
        }
    }

    /** The RLock operations every lock kind answers, and their argument usage. */
    private static final java.util.Map<String, String> LOCK_OPS = java.util.Map.of(
            "lock", "NAME tid LEASE",
            "tryLock", "NAME tid WAIT LEASE",
            "unlock", "NAME tid",
            "forceUnlock", "NAME",
            "isLocked", "NAME",
            "isHeldByThread", "NAME tid",
            "delete", "NAME");

    /** The lock-kind prefixes lockFor accepts. */
    private static final java.util.Set<String> LOCK_KINDS =
            java.util.Set.of("", "r", "w", "f", "s", "fenced", "multi", "nr", "nrf", "group");

    /**
     * Every lock command name, mapped to {prefix, op}: prefix + op after a one-letter prefix
     * ("rlock", "sunlock"), camel case after a word prefix ("fencedUnlock", "multiTryLock").
     */
    private static final java.util.Map<String, String[]> LOCK_COMMANDS = new java.util.HashMap<>();

    static {
        for (String kind : LOCK_KINDS) {
            for (String op : LOCK_OPS.keySet()) {
                String cmd = kind.length() <= 1 ? kind + op
                        : kind + Character.toUpperCase(op.charAt(0)) + op.substring(1);
                LOCK_COMMANDS.put(cmd, new String[] {kind, op});
            }
        }
    }

    /** The contend commands and the lock kind each one runs on. */
    private static final java.util.Map<String, String> CONTEND_KINDS = java.util.Map.of(
            "contend", "", "fcontend", "f", "scontend", "s", "multiContend", "multi");

    /** RedissonClient.getFencedLock(String): Redisson >= 3.19 only, so null on 3.16.4. */
    private static final Method GET_FENCED_LOCK =
            findMethod("org.redisson.api.RedissonClient", "getFencedLock", String.class);
    /**
     * The only fenced-lock token call that takes a thread id: public on the class
     * RedissonFencedLock, not on the RFencedLock interface. A negative wait waits without a
     * limit (lockAndGetTokenAsync(lease, unit) itself is tryLockAndGetTokenAsync(-1, lease, unit)).
     */
    private static final Method FENCED_TRY_LOCK_AND_GET_TOKEN = findMethod("org.redisson.RedissonFencedLock",
            "tryLockAndGetTokenAsync", long.class, long.class, TimeUnit.class, long.class);
    private static final Method FENCED_GET_TOKEN = findMethod("org.redisson.api.RFencedLock", "getToken");

    /** RedissonClient.getNonReentrantLock(String) and getNonReentrantFairLock(String): 4.4+. */
    private static final Method GET_NON_REENTRANT_LOCK =
            findMethod("org.redisson.api.RedissonClient", "getNonReentrantLock", String.class);
    private static final Method GET_NON_REENTRANT_FAIR_LOCK =
            findMethod("org.redisson.api.RedissonClient", "getNonReentrantFairLock", String.class);
    /** RedissonClient.getMultiLock(String group, Collection values): 3.38+. */
    private static final Method GET_GROUP_MULTI_LOCK = findMethod("org.redisson.api.RedissonClient",
            "getMultiLock", String.class, java.util.Collection.class);
    /** RPermitExpirableSemaphore.getLeaseTimeAsync(String): 3.41+. */
    private static final Method PES_LEASE_TIME_ASYNC = findMethod("org.redisson.api.RPermitExpirableSemaphoreAsync",
            "getLeaseTimeAsync", String.class);

    /** Invokes a method this Redisson may lack; UnsupportedOperationException when it does. */
    private static Object since(Method m, String version, Object target, Object... args) throws Exception {
        if (m == null) {
            throw new UnsupportedOperationException("needs Redisson >= " + version + " (this peer runs "
                    + redissonVersion() + ")");
        }
        return m.invoke(target, args);
    }

    /** A public method looked up by name, or null when this Redisson version lacks it. */
    private static Method findMethod(String className, String name, Class<?>... params) {
        try {
            return Class.forName(className).getMethod(name, params);
        } catch (ReflectiveOperationException | LinkageError e) {
            return null;
        }
    }

    /** Invokes a fenced-lock method; UnsupportedOperationException when Redisson lacks it. */
    private static Object fenced(Method m, Object target, Object... args) throws Exception {
        if (m == null) {
            throw new UnsupportedOperationException("the fenced lock needs Redisson >= 3.19 (this peer runs "
                    + redissonVersion() + ")");
        }
        return m.invoke(target, args);
    }

    /**
     * The lock a command prefix selects: "" {@code getLock}, "r" / "w" the read / write
     * lock of {@code getReadWriteLock}, "f" {@code getFairLock}, "s" {@code getSpinLock},
     * "fenced" {@code getFencedLock} (reflectively), "multi" {@code getMultiLock} over
     * {@code getLock} of each comma-separated name. All of them are RLocks.
     */
    private RLock lockFor(String prefix, String name) throws Exception {
        switch (prefix) {
            case "":
                return redisson.getLock(name);
            case "r":
                return redisson.getReadWriteLock(name).readLock();
            case "w":
                return redisson.getReadWriteLock(name).writeLock();
            case "f":
                return redisson.getFairLock(name);
            case "s":
                return redisson.getSpinLock(name);
            case "fenced":
                return (RLock) fenced(GET_FENCED_LOCK, redisson, name);
            case "nr":
                return (RLock) since(GET_NON_REENTRANT_LOCK, "4.4", redisson, name);
            case "nrf":
                return (RLock) since(GET_NON_REENTRANT_FAIR_LOCK, "4.4", redisson, name);
            case "group": {
                // GROUP/v1,v2,...: getMultiLock(group, values), the values Strings encoded by
                // the client's codec (--codec).
                int slash = name.lastIndexOf('/');
                if (slash < 0) {
                    throw new IllegalArgumentException("a group lock is GROUP/value,value,...");
                }
                java.util.List<Object> values = new java.util.ArrayList<>(
                        java.util.Arrays.asList((Object[]) name.substring(slash + 1).split(",", -1)));
                return (RLock) since(GET_GROUP_MULTI_LOCK, "3.38", redisson, name.substring(0, slash), values);
            }
            case "multi": {
                String[] names = name.split(",", -1);
                RLock[] locks = new RLock[names.length];
                for (int i = 0; i < names.length; i++) {
                    if (names[i].isEmpty()) {
                        throw new IllegalArgumentException("empty lock name in " + name);
                    }
                    locks[i] = redisson.getLock(names[i]);
                }
                return redisson.getMultiLock(locks);
            }
            default:
                throw new IllegalArgumentException("unknown command");
        }
    }

    /**
     * Redisson 3.16's waiters queued for a wake-up message, over every lock entry of this
     * client ("unsupported" where Redisson does not expose them: 3.52 and 4.x). A 3.16 waiter queues its listener only
     * after handling the reply to its retry, and a message that comes earlier is missed
     * (docs/interop.md), so tests wait for this before they unlock.
     */
    private String wakeListeners() throws Exception {
        Object pubSub = field(redisson.getLock("wake-listeners-probe"), "pubSub");
        Object entries = pubSub == null ? null : field(pubSub, "entries");
        if (!(entries instanceof java.util.Map)) {
            return "unsupported";
        }
        int queued = 0;
        for (Object entry : ((java.util.Map<?, ?>) entries).values()) {
            // 3.16 has getListeners(); 3.52 and 4.x only the field behind it.
            Object listeners = field(entry, "listeners");
            if (!(listeners instanceof java.util.Collection)) {
                return "unsupported";
            }
            queued += ((java.util.Collection<?>) listeners).size();
        }
        return String.valueOf(queued);
    }

    /** The value of the field {@code name} declared by {@code o}'s class or a superclass. */
    private static Object field(Object o, String name) throws IllegalAccessException {
        for (Class<?> c = o.getClass(); c != null; c = c.getSuperclass()) {
            try {
                java.lang.reflect.Field f = c.getDeclaredField(name);
                f.setAccessible(true);
                return f.get(o);
            } catch (NoSuchFieldException e) {
                // look further up
            }
        }
        return null;
    }

    /** Checks the argument count of LOCK_OPS operation {@code op} for command {@code cmd}. */
    private static void needLockArgs(String cmd, String op, String[] p) {
        need(p, LOCK_OPS.get(op).split(" ").length, cmd + " " + LOCK_OPS.get(op));
    }

    /** One LOCK_OPS operation {@code op} on the lock {@code prefix} selects; {@code cmd} names both. */
    private String lockOp(String cmd, String prefix, String op, String[] p) throws Exception {
        needLockArgs(cmd, op, p);
        RLock lock = lockFor(prefix, p[2]);
        switch (op) {
            case "lock": {
                long tid = Long.parseLong(p[3]);
                long lease = Long.parseLong(p[4]);
                if (prefix.equals("group")) {
                    // RedissonFasterMultiLock's lockAsync(threadId) throws NullPointerException
                    // and its lockAsync(lease, unit, threadId) never waits: wait with tryLock.
                    if (lease <= 0) {
                        throw new IllegalArgumentException("a group lock needs a LEASE here");
                    }
                    if (!Boolean.TRUE.equals(lock.tryLockAsync(600_000, lease, TimeUnit.MILLISECONDS, tid).get())) {
                        throw new IllegalStateException("not acquired within 10 minutes");
                    }
                    return null;
                }
                if (lease < 0) {
                    lock.lockAsync(tid).get();
                } else {
                    lock.lockAsync(lease, TimeUnit.MILLISECONDS, tid).get();
                }
                return null;
            }
            case "tryLock": {
                long tid = Long.parseLong(p[3]);
                long wait = Long.parseLong(p[4]);
                long lease = Long.parseLong(p[5]);
                Boolean ok = lock.tryLockAsync(wait, lease, TimeUnit.MILLISECONDS, tid).get();
                return String.valueOf(Boolean.TRUE.equals(ok));
            }
            case "unlock":
                lock.unlockAsync(Long.parseLong(p[3])).get();
                return null;
            case "forceUnlock":
                return String.valueOf(lock.forceUnlock());
            case "isLocked":
                return String.valueOf(lock.isLocked());
            case "isHeldByThread":
                return String.valueOf(lock.isHeldByThread(Long.parseLong(p[3])));
            case "delete":
                // Not on RLock: on the implementation (RObject), as a Java service reaches it.
                return String.valueOf(((org.redisson.api.RObject) lock).delete());
            default:
                throw new IllegalArgumentException("unknown command");
        }
    }

    /**
     * The semaphore ("sem", getSemaphore), permit-expirable semaphore ("pes",
     * getPermitExpirableSemaphore) and count-down latch ("latch", getCountDownLatch)
     * commands and their argument usage; each takes the object NAME first.
     */
    private static final java.util.Map<String, String> SYNC_OPS = java.util.Map.ofEntries(
            java.util.Map.entry("semTrySetPermits", "NAME n"),
            java.util.Map.entry("semAddPermits", "NAME n"),
            java.util.Map.entry("semAcquire", "NAME n"),
            java.util.Map.entry("semTryAcquire", "NAME n WAIT"),
            java.util.Map.entry("semRelease", "NAME n"),
            java.util.Map.entry("semAvailable", "NAME"),
            java.util.Map.entry("semDrain", "NAME"),
            java.util.Map.entry("semContend", "NAME ITER INSIDE_KEY MAX_KEY"),
            java.util.Map.entry("pesTrySetPermits", "NAME n"),
            java.util.Map.entry("pesAcquire", "NAME LEASE"),
            java.util.Map.entry("pesTryAcquire", "NAME WAIT LEASE"),
            java.util.Map.entry("pesRelease", "NAME ID"),
            java.util.Map.entry("pesTryRelease", "NAME ID"),
            java.util.Map.entry("pesAvailable", "NAME"),
            java.util.Map.entry("pesLeaseTime", "NAME ID"),
            java.util.Map.entry("latchTrySetCount", "NAME c"),
            java.util.Map.entry("latchCountDown", "NAME"),
            java.util.Map.entry("latchCount", "NAME"),
            java.util.Map.entry("latchAwait", "NAME WAIT"),
            java.util.Map.entry("latchDelete", "NAME"));

    /** One SYNC_OPS command on the object its prefix selects. */
    private String syncOp(String cmd, String[] p) throws Exception {
        need(p, SYNC_OPS.get(cmd).split(" ").length, cmd + " " + SYNC_OPS.get(cmd));
        if (cmd.startsWith("sem")) {
            return semOp(cmd, redisson.getSemaphore(p[2]), p);
        }
        if (cmd.startsWith("pes")) {
            return pesOp(cmd, redisson.getPermitExpirableSemaphore(p[2]), p);
        }
        return latchOp(cmd, redisson.getCountDownLatch(p[2]), p);
    }

    private String semOp(String cmd, RSemaphore sem, String[] p) throws Exception {
        switch (cmd) {
            case "semTrySetPermits":
                return String.valueOf(sem.trySetPermits(Integer.parseInt(p[3])));
            case "semAddPermits":
                sem.addPermits(Integer.parseInt(p[3]));
                return null;
            case "semAcquire":
                sem.acquire(Integer.parseInt(p[3]));
                return null;
            case "semTryAcquire":
                return String.valueOf(sem.tryAcquire(Integer.parseInt(p[3]), Long.parseLong(p[4]),
                        TimeUnit.MILLISECONDS));
            case "semRelease":
                sem.release(Integer.parseInt(p[3]));
                return null;
            case "semAvailable":
                return String.valueOf(sem.availablePermits());
            case "semDrain":
                return String.valueOf(sem.drainPermits());
            case "semContend":
                semContend(sem, Long.parseLong(p[3]), p[4], p[5]);
                return null;
            default:
                throw new IllegalArgumentException("unknown command");
        }
    }

    /** Permit ids are the strings Redisson returns; a LEASE of -1 means the permit never expires. */
    private String pesOp(String cmd, RPermitExpirableSemaphore pes, String[] p) throws Exception {
        switch (cmd) {
            case "pesTrySetPermits":
                return String.valueOf(pes.trySetPermits(Integer.parseInt(p[3])));
            case "pesAcquire":
                return pes.acquire(Long.parseLong(p[3]), TimeUnit.MILLISECONDS);
            case "pesTryAcquire":
                return String.valueOf(pes.tryAcquire(Long.parseLong(p[3]), Long.parseLong(p[4]),
                        TimeUnit.MILLISECONDS));
            case "pesRelease":
                // async + get: 4.x's sync release wraps the IllegalArgumentException of an
                // unknown id in RedisException "Unexpected exception while processing command"
                pes.releaseAsync(p[3]).get();
                return null;
            case "pesTryRelease":
                return String.valueOf(pes.tryRelease(p[3]));
            case "pesAvailable":
                return String.valueOf(pes.availablePermits());
            case "pesLeaseTime":
                // async + get: the sync getLeaseTime wraps the IllegalArgumentException of an
                // unknown id in RedisException
                return String.valueOf(((Future<?>) since(PES_LEASE_TIME_ASYNC, "3.41", pes, p[3])).get());
            default:
                throw new IllegalArgumentException("unknown command");
        }
    }

    private String latchOp(String cmd, RCountDownLatch latch, String[] p) throws Exception {
        switch (cmd) {
            case "latchTrySetCount":
                return String.valueOf(latch.trySetCount(Long.parseLong(p[3])));
            case "latchCountDown":
                latch.countDown();
                return null;
            case "latchCount":
                return String.valueOf(latch.getCount());
            case "latchAwait": {
                long wait = Long.parseLong(p[3]);
                if (wait < 0) {
                    latch.await();
                    return "true";
                }
                return String.valueOf(latch.await(wait, TimeUnit.MILLISECONDS));
            }
            case "latchDelete":
                return String.valueOf(latch.delete());
            default:
                throw new IllegalArgumentException("unknown command");
        }
    }

    /**
     * Locks the fenced lock for thread id tid (waiting up to WAIT ms, without a limit when
     * negative; LEASE -1 = watchdog) and returns its fencing token, or null when not acquired.
     */
    private static Long lockAndGetToken(RLock fencedLock, long tid, long wait, long lease) throws Exception {
        Future<?> f = (Future<?>) fenced(FENCED_TRY_LOCK_AND_GET_TOKEN, fencedLock, wait, lease,
                TimeUnit.MILLISECONDS, tid);
        return (Long) f.get();
    }

    /** Enters a critical section on the resource server (see tests/failover/resource.rs). */
    private static final String SAFETY_ENTER =
            "local inside = redis.call('INCR', KEYS[1]) "
            + "local token = tonumber(ARGV[3]) "
            + "local newest, by = string.match(redis.call('GET', KEYS[2]) or '0 -', '(%d+) (%S+)') "
            + "local regressed = '-' "
            + "if token <= tonumber(newest) then regressed = by else redis.call('SET', KEYS[2], token .. ' ' .. ARGV[1]) end "
            + "local t = redis.call('TIME') "
            + "local us = t[1] .. string.format('%06d', tonumber(t[2])) "
            + "redis.call('RPUSH', KEYS[3], 'E ' .. ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. inside .. ' ' .. regressed .. ' ' .. us) "
            + "return tostring(inside)";
    private static final String SAFETY_EXIT =
            "redis.call('DECR', KEYS[1]) "
            + "local t = redis.call('TIME') "
            + "local us = t[1] .. string.format('%06d', tonumber(t[2])) "
            + "redis.call('RPUSH', KEYS[2], 'X ' .. ARGV[1] .. ' ' .. us) "
            + "return us";

    /**
     * The failover suite's JVM client: THREADS threads take fenced locks PREFIX:lock-0 ..
     * PREFIX:lock-(LOCKS-1) at random (tryLock, 1.5 s), enter and leave each critical section
     * on the resource server at RESOURCE_URL (logging it to the list "jsections"), hold it
     * 5-40 ms (one in four: 0.3-2.5 s), unlock; until the key "safety:stop" on the resource is "1". Returns
     * "SECTIONS ERRORS".
     */
    private String safety(String prefix, int locks, int threads, String resourceUrl) throws Exception {
        Config rc = new Config();
        rc.useSingleServer().setAddress(resourceUrl);
        RedissonClient resource = Redisson.create(rc);
        java.util.concurrent.atomic.AtomicLong sections = new java.util.concurrent.atomic.AtomicLong();
        java.util.concurrent.atomic.AtomicLong errors = new java.util.concurrent.atomic.AtomicLong();
        try {
            org.redisson.api.RScript script = resource.getScript(StringCodec.INSTANCE);
            RBucket<String> stop = resource.getBucket("safety:stop", StringCodec.INSTANCE);
            java.util.List<Thread> workers = new java.util.ArrayList<>();
            for (int t = 0; t < threads; t++) {
                final String holder = "j" + t;
                Thread worker = new Thread(() -> {
                    java.util.Random random = new java.util.Random();
                    long tid = Thread.currentThread().getId();
                    while (!"1".equals(stop.get())) {
                        String name = prefix + ":lock-" + random.nextInt(locks);
                        RLock lock;
                        Long token;
                        try {
                            lock = lockFor("fenced", name);
                            token = lockAndGetToken(lock, tid, 1500, -1);
                        } catch (Exception e) {
                            errors.incrementAndGet();
                            try { Thread.sleep(20); } catch (InterruptedException ie) { return; }
                            continue;
                        }
                        if (token == null) {
                            continue;
                        }
                        try {
                            script.eval(org.redisson.api.RScript.Mode.READ_WRITE, SAFETY_ENTER,
                                    org.redisson.api.RScript.ReturnType.VALUE,
                                    java.util.List.of("inside:" + name, "token:" + name, "jsections"),
                                    holder, name, String.valueOf(token));
                            // As the Rust clients: one section in four is long.
                            Thread.sleep(random.nextInt(4) == 0 ? 300 + random.nextInt(2200) : 5 + random.nextInt(35));
                            script.eval(org.redisson.api.RScript.Mode.READ_WRITE, SAFETY_EXIT,
                                    org.redisson.api.RScript.ReturnType.VALUE,
                                    java.util.List.of("inside:" + name, "jsections"), holder);
                            sections.incrementAndGet();
                        } catch (InterruptedException e) {
                            return;
                        } finally {
                            try {
                                lock.unlockAsync(tid).get();
                            } catch (Exception e) {
                                errors.incrementAndGet();
                            }
                        }
                    }
                }, "safety-" + holder);
                worker.start();
                workers.add(worker);
            }
            for (Thread worker : workers) {
                worker.join();
            }
            return sections.get() + " " + errors.get();
        } finally {
            resource.shutdown();
        }
    }

    /**
     * ITER times on the fenced lock: lock (watchdog, thread id tid) and get token t,
     * RPUSH t (plain decimal string) onto the list TOKENS_KEY, unlock. Returns ITER.
     */
    private long fencedContend(RLock lock, long tid, long iterations, String tokensKey) throws Exception {
        RList<String> tokens = redisson.getList(tokensKey, StringCodec.INSTANCE);
        for (long i = 0; i < iterations; i++) {
            Long token = lockAndGetToken(lock, tid, -1, -1);
            try {
                tokens.add(String.valueOf(token));
            } finally {
                lock.unlockAsync(tid).get();
            }
        }
        return iterations;
    }

    /**
     * ITER times on the semaphore: acquire 1 permit, INCR inside, raise MAX_KEY to that value
     * (compare-and-set loop), sleep 1 ms, DECR inside, release 1. Both keys are RAtomicLongs
     * (plain decimal strings), so raw GET/INCR/DECR interoperate.
     */
    private void semContend(RSemaphore sem, long iterations, String insideKey, String maxKey) throws Exception {
        RAtomicLong inside = redisson.getAtomicLong(insideKey);
        RAtomicLong max = redisson.getAtomicLong(maxKey);
        for (long i = 0; i < iterations; i++) {
            sem.acquire();
            try {
                long now = inside.incrementAndGet();
                long seen = max.get();
                while (now > seen && !max.compareAndSet(seen, now)) {
                    seen = max.get();
                }
                Thread.sleep(1);
                inside.decrementAndGet();
            } finally {
                sem.release();
            }
        }
    }

    /**
     * ITER times on {@code lock} (getLock, getFairLock, getSpinLock or getMultiLock):
     * lock (watchdog lease, thread id tid); INCR inside (overlap if != 1);
     * non-atomic GET/SET counter+1; DECR inside; unlock. Returns the overlap count.
     * All values are plain decimal strings so raw GET/SET/INCR clients interoperate.
     */
    private long contend(RLock lock, long tid, long iterations, String insideKey, String counterKey)
            throws Exception {
        RAtomicLong inside = redisson.getAtomicLong(insideKey);
        RBucket<String> counter = redisson.getBucket(counterKey, StringCodec.INSTANCE);
        long overlaps = 0;
        for (long i = 0; i < iterations; i++) {
            lock.lockAsync(tid).get();
            try {
                long v = inside.incrementAndGet();
                if (v != 1) {
                    overlaps++;
                }
                String c = counter.get();
                long cur = (c == null) ? 0 : Long.parseLong(c.trim());
                counter.set(Long.toString(cur + 1));
                inside.decrementAndGet();
            } finally {
                lock.unlockAsync(tid).get();
            }
        }
        return overlaps;
    }

    /**
     * ITER sections on the read-write lock NAME (watchdog lease, thread id tid); section i
     * writes when i % WRITE_EVERY == 0, else reads. Write: INCR writers, GET readers
     * (violation unless 1 and 0), DECR writers. Read: INCR readers, GET writers (violation
     * unless 0), sleep 1 ms so readers overlap, DECR readers. Returns the violation count.
     * Both keys hold plain decimal strings (RAtomicLong), so raw INCR/DECR/GET interoperate.
     */
    private long rwcontend(String name, long tid, long iterations, long writeEvery, String writersKey,
            String readersKey) throws Exception {
        if (writeEvery < 1) {
            throw new IllegalArgumentException("WRITE_EVERY must be >= 1");
        }
        RLock read = lockFor("r", name);
        RLock write = lockFor("w", name);
        RAtomicLong writers = redisson.getAtomicLong(writersKey);
        RAtomicLong readers = redisson.getAtomicLong(readersKey);
        long violations = 0;
        for (long i = 0; i < iterations; i++) {
            boolean writing = i % writeEvery == 0;
            RLock lock = writing ? write : read;
            lock.lockAsync(tid).get();
            try {
                if (writing) {
                    long w = writers.incrementAndGet();
                    long r = readers.get();
                    if (w != 1 || r != 0) {
                        violations++;
                    }
                    writers.decrementAndGet();
                } else {
                    readers.incrementAndGet();
                    if (writers.get() != 0) {
                        violations++;
                    }
                    Thread.sleep(1);
                    readers.decrementAndGet();
                }
            } finally {
                lock.unlockAsync(tid).get();
            }
        }
        return violations;
    }

    /**
     * Uncontended throughput: CONCURRENCY threads, each locking and unlocking its
     * own lock PREFIX:i (watchdog lease) in a loop for DURATION_MS. Replies
     * "ops elapsed_ms p50_us p99_us" over every lock+unlock pair.
     */
    private String bench(String prefix, int concurrency, long durationMs) throws Exception {
        long[][] samples = new long[concurrency][];
        int[] counts = new int[concurrency];
        Thread[] threads = new Thread[concurrency];
        long start = System.nanoTime();
        long deadline = start + durationMs * 1_000_000L;
        for (int i = 0; i < concurrency; i++) {
            final int w = i;
            threads[i] = new Thread(() -> {
                RLock lock = redisson.getLock(prefix + ":" + w);
                long[] mine = new long[1 << 16];
                int n = 0;
                while (System.nanoTime() < deadline) {
                    long t0 = System.nanoTime();
                    lock.lock();
                    lock.unlock();
                    if (n == mine.length) {
                        mine = java.util.Arrays.copyOf(mine, n * 2);
                    }
                    mine[n++] = System.nanoTime() - t0;
                }
                samples[w] = mine;
                counts[w] = n;
            });
            threads[i].start();
        }
        for (Thread t : threads) {
            t.join();
        }
        long elapsedNs = System.nanoTime() - start;
        int total = 0;
        for (int c : counts) {
            total += c;
        }
        long[] all = new long[total];
        int k = 0;
        for (int i = 0; i < concurrency; i++) {
            System.arraycopy(samples[i], 0, all, k, counts[i]);
            k += counts[i];
        }
        java.util.Arrays.sort(all);
        long p50 = total == 0 ? 0 : all[(int) (total * 0.50)] / 1000;
        long p99 = total == 0 ? 0 : all[Math.min(total - 1, (int) (total * 0.99))] / 1000;
        return total + " " + (elapsedNs / 1_000_000L) + " " + p50 + " " + p99;
    }

    /**
     * Hand-off: WAITERS threads each wait for NAME once (giving up at the
     * deadline), stamp the wall clock (µs) when they hold it and again just
     * before unlocking. Replies "acq:rel acq:rel ..." for those that held it.
     */
    private String handoff(RLock lock, int waiters, long deadlineUnixMs) throws Exception {
        String[] stamps = new String[waiters];
        Thread[] threads = new Thread[waiters];
        for (int i = 0; i < waiters; i++) {
            final int w = i;
            threads[i] = new Thread(() -> {
                try {
                    long wait = deadlineUnixMs - System.currentTimeMillis();
                    if (wait > 0 && lock.tryLock(wait, TimeUnit.MILLISECONDS)) {
                        long acq = micros();
                        long rel = micros();
                        lock.unlock();
                        stamps[w] = acq + ":" + rel;
                    }
                } catch (Exception e) {
                    // counted as not acquired
                }
            });
            threads[i].start();
        }
        for (Thread t : threads) {
            t.join();
        }
        StringBuilder out = new StringBuilder();
        for (String st : stamps) {
            if (st != null) {
                out.append(st).append(' ');
            }
        }
        return out.toString().trim();
    }

    private static long micros() {
        java.time.Instant now = java.time.Instant.now();
        return now.getEpochSecond() * 1_000_000L + now.getNano() / 1_000;
    }
}
