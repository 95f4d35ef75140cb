// SPDX-License-Identifier: MIT
// yield, Java 25 virtual threads: two virtual threads alternate with
// Thread.yield(). Run with -Djdk.virtualThreadScheduler.parallelism=1
// -Djdk.virtualThreadScheduler.maxPoolSize=1 (one carrier). Three warm-up
// rounds (JIT) precede the measured one.
public final class Yield {
    static volatile int lastRunner = -1;

    static long[] round(int n) throws InterruptedException {
        long[] switched = new long[2];
        Thread[] t = new Thread[2];
        for (int i = 0; i < 2; i++) {
            final int me = i;
            t[i] = Thread.ofVirtual().unstarted(() -> {
                long sw = 0;
                for (int k = 0; k < n; k++) {
                    if (lastRunner != me) {
                        sw++;
                        lastRunner = me;
                    }
                    Thread.yield();
                }
                switched[me] = sw;
            });
        }
        long t0 = System.nanoTime();
        t[0].start();
        t[1].start();
        t[0].join();
        t[1].join();
        long dt = System.nanoTime() - t0;
        return new long[] {dt, switched[0] + switched[1]};
    }

    public static void main(String[] args) throws Exception {
        int n = Util.arg(args, 1000000);
        for (int w = 0; w < 3; w++) round(Math.max(1000, n / 5));
        long[] r = round(n);
        double yields = 2.0 * n;
        Util.print("yield", "ns_per_switch", r[0] / yields, "ns");
        Util.print("yield", "switch_pct", 100.0 * r[1] / yields, "%");
    }
}
