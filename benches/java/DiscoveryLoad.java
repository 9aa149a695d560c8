import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executor;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.LongAdder;

import io.netty.channel.nio.NioEventLoopGroup;
import org.redisson.Redisson;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * The JVM side of the discovery benchmark (benches/src/discovery.rs): many Redisson clients in
 * one JVM, each with its own connections, pools and topology scans, driven over stdin.
 *
 * <p>{@code java -cp interop-peer-4.7.0.jar:CLASSES DiscoveryLoad (--cluster ADDRS | --sentinel
 * MASTER ADDRS) --clients N}; ADDRS is a comma-separated list of {@code redis://} addresses.
 * Prints {@code READY N} once every client is connected, then answers one line per command:
 *
 * <ul>
 *   <li>{@code contend PREFIX LOCKS TASKS MILLIS HOLD_MS}: every client runs TASKS loops, each
 *       taking a random one of the locks PREFIX:0 .. PREFIX:LOCKS-1 (watchdog lease, its own
 *       thread id), holding it HOLD_MS and releasing it, until MILLIS have passed; replies
 *       {@code OK <acquisitions> <errors>} once every loop has stopped, followed by
 *       {@code \t<call>: <exception>\t<count>} for each kind of error.
 *   <li>{@code hold PREFIX TASKS}: every client takes TASKS locks of its own (watchdog lease)
 *       and keeps them; {@code OK <held>}.
 *   <li>{@code release}: releases them; {@code OK <released>}.
 *   <li>{@code quit}: shuts every client down and exits.
 * </ul>
 *
 * <p>The clients share one Netty event loop group and one executor, as several clients in one
 * JVM can: a hundred default clients would start 3200 Netty threads on a 2-core machine. That
 * changes no command a client sends.
 */
public final class DiscoveryLoad {

    private static PrintStream out;
    private static final List<RedissonClient> CLIENTS = new ArrayList<>();
    private static final List<List<RLock>> HELD = new ArrayList<>();

    // NioEventLoopGroup: the group Redisson itself makes in NIO mode, its default.
    @SuppressWarnings("deprecation")
    public static void main(String[] args) throws Exception {
        out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        System.setOut(System.err);
        String[] cluster = null;
        String master = null;
        String[] sentinels = null;
        int clients = 100;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--cluster":
                    cluster = args[++i].split(",");
                    break;
                case "--sentinel":
                    master = args[++i];
                    sentinels = args[++i].split(",");
                    break;
                case "--clients":
                    clients = Integer.parseInt(args[++i]);
                    break;
                default:
                    throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        NioEventLoopGroup group = new NioEventLoopGroup(2 * Runtime.getRuntime().availableProcessors());
        ExecutorService executor = Executors.newFixedThreadPool(16);
        ExecutorService starting = Executors.newFixedThreadPool(4);
        List<Future<RedissonClient>> started = new ArrayList<>();
        for (int i = 0; i < clients; i++) {
            final String[] nodes = cluster;
            final String name = master;
            final String[] watchers = sentinels;
            started.add(starting.submit(() -> {
                Config config = new Config();
                config.setEventLoopGroup(group);
                config.setExecutor(executor);
                if (nodes != null) {
                    config.useClusterServers().addNodeAddress(nodes);
                } else {
                    config.useSentinelServers().setMasterName(name).addSentinelAddress(watchers);
                }
                return Redisson.create(config);
            }));
        }
        for (Future<RedissonClient> f : started) {
            CLIENTS.add(f.get());
        }
        starting.shutdown();
        out.println("READY " + CLIENTS.size());
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] p = line.trim().split("\\s+");
            try {
                switch (p[0]) {
                    case "contend":
                        out.println("OK " + contend(p[1], Integer.parseInt(p[2]), Integer.parseInt(p[3]),
                                Long.parseLong(p[4]), Long.parseLong(p[5])));
                        break;
                    case "hold":
                        out.println("OK " + hold(p[1], Integer.parseInt(p[2])));
                        break;
                    case "release":
                        out.println("OK " + release());
                        break;
                    case "quit":
                        quit();
                        return;
                    default:
                        out.println("ERR unknown command " + p[0]);
                }
            } catch (Exception e) {
                out.println("ERR " + e.toString().replaceAll("[\\r\\n]+", " "));
            }
        }
        quit();
    }

    private static void quit() {
        // Never hang on shutdown.
        Thread guard = new Thread(() -> {
            try {
                Thread.sleep(30_000);
            } catch (InterruptedException e) {
                return;
            }
            Runtime.getRuntime().halt(0);
        });
        guard.setDaemon(true);
        guard.start();
        CLIENTS.parallelStream().forEach(c -> c.shutdown(0, 2, TimeUnit.SECONDS));
        out.println("OK");
        System.exit(0);
    }

    /** One task's loop: lock a random lock, hold it, release it, until the deadline. */
    private static final class Loop {
        final RLock[] locks;
        final long tid;
        final SplittableRandom random;
        final long deadline;
        final long holdMs;
        final AtomicLong acquired;
        final AtomicLong errors;
        final ConcurrentHashMap<String, LongAdder> kinds;
        final CountDownLatch done;
        final Executor afterHold;
        final Executor afterError;

        Loop(RLock[] locks, long tid, long seed, long deadline, long holdMs, AtomicLong acquired,
                AtomicLong errors, ConcurrentHashMap<String, LongAdder> kinds, CountDownLatch done) {
            this.locks = locks;
            this.tid = tid;
            this.random = new SplittableRandom(seed);
            this.deadline = deadline;
            this.holdMs = holdMs;
            this.acquired = acquired;
            this.errors = errors;
            this.kinds = kinds;
            this.done = done;
            this.afterHold = CompletableFuture.delayedExecutor(holdMs, TimeUnit.MILLISECONDS);
            this.afterError = CompletableFuture.delayedExecutor(10, TimeUnit.MILLISECONDS);
        }

        void next() {
            if (System.nanoTime() >= deadline) {
                done.countDown();
                return;
            }
            RLock lock = locks[random.nextInt(locks.length)];
            lock.lockAsync(tid).whenComplete((ok, e) -> {
                if (e != null) {
                    failed("lock", e);
                    return;
                }
                acquired.incrementAndGet();
                afterHold.execute(() -> lock.unlockAsync(tid).whenComplete((ok2, e2) -> {
                    if (e2 != null) {
                        failed("unlock", e2);
                    } else {
                        next();
                    }
                }));
            });
        }

        void failed(String call, Throwable e) {
            errors.incrementAndGet();
            Throwable root = e;
            while (root.getCause() != null && root.getCause() != root
                    && (root instanceof java.util.concurrent.CompletionException
                        || root instanceof java.util.concurrent.ExecutionException)) {
                root = root.getCause();
            }
            String text = root.toString().replaceAll("\\s+", " ");
            String kind = call + ": " + text.substring(0, Math.min(120, text.length()));
            kinds.computeIfAbsent(kind, k -> new LongAdder()).increment();
            afterError.execute(this::next);
        }
    }

    private static String contend(String prefix, int lockCount, int tasks, long millis, long holdMs)
            throws InterruptedException {
        long deadline = System.nanoTime() + millis * 1_000_000L;
        AtomicLong acquired = new AtomicLong();
        AtomicLong errors = new AtomicLong();
        ConcurrentHashMap<String, LongAdder> kinds = new ConcurrentHashMap<>();
        CountDownLatch done = new CountDownLatch(CLIENTS.size() * tasks);
        for (int c = 0; c < CLIENTS.size(); c++) {
            RLock[] locks = new RLock[lockCount];
            for (int i = 0; i < lockCount; i++) {
                locks[i] = CLIENTS.get(c).getLock(prefix + ":" + i);
            }
            for (int t = 0; t < tasks; t++) {
                new Loop(locks, t + 1, c * 7919L + t, deadline, holdMs, acquired, errors, kinds, done).next();
            }
        }
        done.await();
        StringBuilder reply = new StringBuilder(acquired.get() + " " + errors.get());
        kinds.forEach((kind, n) -> reply.append('\t').append(kind).append('\t').append(n.sum()));
        return reply.toString();
    }

    private static int hold(String prefix, int tasks) throws Exception {
        List<CompletableFuture<Void>> pending = new ArrayList<>();
        HELD.clear();
        for (int c = 0; c < CLIENTS.size(); c++) {
            List<RLock> mine = new ArrayList<>();
            for (int t = 0; t < tasks; t++) {
                RLock lock = CLIENTS.get(c).getLock(prefix + ":" + c + ":" + t);
                mine.add(lock);
                pending.add(lock.lockAsync(t + 1).toCompletableFuture());
            }
            HELD.add(mine);
        }
        CompletableFuture.allOf(pending.toArray(new CompletableFuture<?>[0])).get(120, TimeUnit.SECONDS);
        return pending.size();
    }

    private static int release() throws Exception {
        List<CompletableFuture<Void>> pending = new ArrayList<>();
        for (List<RLock> mine : HELD) {
            for (int t = 0; t < mine.size(); t++) {
                pending.add(mine.get(t).unlockAsync(t + 1).toCompletableFuture());
            }
        }
        CompletableFuture.allOf(pending.toArray(new CompletableFuture<?>[0])).get(120, TimeUnit.SECONDS);
        HELD.clear();
        return pending.size();
    }
}
