// SPDX-License-Identifier: MIT
// pingpong, Java 25 virtual threads: two virtual threads bounce a counter
// over two SynchronousQueue<Integer> (ping, pong; a SynchronousQueue has no
// capacity: put waits for a take, like an unbuffered channel). ns per round
// trip. Usage: Pingpong N W — run.py starts one JVM per W with
// -Djdk.virtualThreadScheduler.parallelism=W -Djdk.virtualThreadScheduler.maxPoolSize=W;
// W only names the metric. Three warm-up rounds (JIT) precede the measured one.
import java.util.concurrent.SynchronousQueue;

public final class Pingpong {
    static double round(int n) throws Exception {
        SynchronousQueue<Integer> ping = new SynchronousQueue<>(), pong = new SynchronousQueue<>();
        long[] t = new long[2];
        Thread b = Thread.ofVirtual().start(() -> {
            try {
                for (int i = 0; i < n; i++) pong.put(ping.take() + 1);
            } catch (InterruptedException e) {
                throw new RuntimeException(e);
            }
        });
        Thread a = Thread.ofVirtual().start(() -> {
            try {
                t[0] = System.nanoTime();
                for (int i = 0; i < n; i++) {
                    ping.put(i);
                    int back = pong.take();
                    if (back != i + 1) {
                        System.err.printf("pingpong: got %d, want %d%n", back, i + 1);
                        System.exit(2);
                    }
                }
                t[1] = System.nanoTime();
            } catch (InterruptedException e) {
                throw new RuntimeException(e);
            }
        });
        a.join();
        b.join();
        return (double) (t[1] - t[0]) / n;
    }

    public static void main(String[] args) throws Exception {
        int n = Util.arg(args, 1000000);
        String w = args.length > 1 ? args[1] : "1";
        for (int k = 0; k < 3; k++) round(Math.max(1000, n / 5));
        Util.print("pingpong", "ns_per_roundtrip_w" + w, round(n), "ns");
        Util.print("pingpong", "roundtrips_w" + w, n, "count");
    }
}
