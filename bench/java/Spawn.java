// SPDX-License-Identifier: MIT
// spawn, Java 25 virtual threads: Thread.ofVirtual().start(r) + join() of
// trivial threads in batches of 1000. A warm-up pass of 100,000 threads
// (JIT) precedes the measured one.
public final class Spawn {
    static final int BATCH = 1000;

    static long run(int n) throws InterruptedException {
        Thread[] t = new Thread[BATCH];
        Runnable body = () -> {};
        long t0 = System.nanoTime();
        for (int done = 0; done < n;) {
            int b = Math.min(BATCH, n - done);
            for (int i = 0; i < b; i++) t[i] = Thread.ofVirtual().start(body);
            for (int i = 0; i < b; i++) t[i].join();
            done += b;
        }
        return System.nanoTime() - t0;
    }

    public static void main(String[] args) throws Exception {
        int n = Util.arg(args, 1000000);
        run(Math.min(n, 100000));
        long dt = run(n);
        Util.print("spawn", "ns_per_thread", (double) dt / n, "ns");
        Util.print("spawn", "threads", n, "count");
    }
}
