package redissoninterop;

import java.net.InetAddress;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

import org.redisson.api.RScript;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;

/**
 * Names a JVM's Redisson client in redisson-lock's client registry, so that `ls`, `status` and
 * `inspect` say who holds a lock ("billing-java/pod-3 on host pid N") beside Rust holders.
 * Writes `redisson_lock__client:<id>` at start, keeps it alive every third of its TTL (written
 * again if a failover or an eviction lost it), deletes it on close. Copy it as it is
 * (docs/interop.md); it runs on Redisson 3.16 to 4.x.
 */
public final class RedissonLockRegistrar implements AutoCloseable {
    // The whole entry, stale labels gone, then its TTL.
    private static final String WRITE = "redis.call('del', KEYS[1]); "
            + "redis.call('hset', KEYS[1], unpack(ARGV, 2)); "
            + "redis.call('pexpire', KEYS[1], ARGV[1]); return 1";
    // Alive: a PEXPIRE. Gone: written again, as it was (`started` kept).
    private static final String REFRESH = "if redis.call('pexpire', KEYS[1], ARGV[1]) == 1 "
            + "then return 1 end; " + WRITE;

    private final RScript script;
    private final List<Object> key;
    private final Object[] args;
    private final ScheduledExecutorService timer = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "redisson-lock-registrar");
        t.setDaemon(true);
        return t;
    });

    /** ttlMs: your lockWatchdogTimeout; instance may be null; labels show as KEY=VALUE. */
    public RedissonLockRegistrar(RedissonClient redisson, String service, String instance,
            Map<String, String> labels, long ttlMs) throws Exception {
        script = redisson.getScript(StringCodec.INSTANCE);
        key = List.of("redisson_lock__client:" + redisson.getId());
        String version = RedissonClient.class.getPackage().getImplementationVersion();
        List<String> a = new ArrayList<>(List.of(String.valueOf(ttlMs),
                "host", InetAddress.getLocalHost().getHostName(),
                "pid", String.valueOf(ProcessHandle.current().pid()),
                "service", service, "runtime", "java",
                "version", version == null ? "redisson" : "redisson " + version,
                "started", String.valueOf(System.currentTimeMillis())));
        if (instance != null) {
            a.addAll(List.of("instance", instance));
        }
        labels.forEach((k, v) -> a.addAll(List.of("label:" + k, v)));
        args = a.toArray();
        script.eval(RScript.Mode.READ_WRITE, WRITE, RScript.ReturnType.VALUE, key, args);
        long every = Math.max(1, ttlMs / 3);
        timer.scheduleAtFixedRate(this::refresh, every, every, TimeUnit.MILLISECONDS);
    }

    private void refresh() {
        try {
            script.eval(RScript.Mode.READ_WRITE, REFRESH, RScript.ReturnType.VALUE, key, args);
        } catch (RuntimeException e) {
            // Best effort, as the Rust client's: the next refresh tries again.
        }
    }

    /** Stops the refresh and deletes the entry (call it at shutdown, before redisson.shutdown()). */
    @Override
    public void close() {
        timer.shutdownNow();
        script.eval(RScript.Mode.READ_WRITE, "redis.call('del', KEYS[1]); return 1",
                RScript.ReturnType.VALUE, key);
    }
}
