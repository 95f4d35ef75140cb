// SPDX-License-Identifier: MIT
// mutex, Java 25 virtual threads: 8 virtual threads on 2 carriers (run with
// -Djdk.virtualThreadScheduler.parallelism=2 -Djdk.virtualThreadScheduler.maxPoolSize=2)
// each lock one ReentrantLock (non-fair), increment a shared counter and
// unlock, N/8 times. ops per second. Three warm-up rounds (JIT) first.
import java.util.concurrent.locks.ReentrantLock;

public final class Mutex {
    static final int THREADS = 8;
    static final ReentrantLock lock = new ReentrantLock();
    static long counter;

    static double run(int per) throws Exception {
        counter = 0;
        Thread[] t = new Thread[THREADS];
        long t0 = System.nanoTime();
        for (int i = 0; i < THREADS; i++) {
            t[i] = Thread.ofVirtual().start(() -> {
                for (int k = 0; k < per; k++) {
                    lock.lock();
                    try {
                        counter++;
                    } finally {
                        lock.unlock();
                    }
                }
            });
        }
        for (Thread x : t) x.join();
        long dt = System.nanoTime() - t0;
        if (counter != (long) per * THREADS) {
            System.err.printf("mutex: counter %d, want %d%n", counter, (long) per * THREADS);
            System.exit(2);
        }
        return counter / (dt / 1e9);
    }

    public static void main(String[] args) throws Exception {
        int per = Util.arg(args, 8000000) / THREADS;
        for (int k = 0; k < 3; k++) run(Math.max(1000, per / 5));
        Util.print("mutex", "ops_per_sec", run(per), "ops/s");
        Util.print("mutex", "nthreads", THREADS, "count");
    }
}
