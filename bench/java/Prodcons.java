// SPDX-License-Identifier: MIT
// prodcons, Java 25 virtual threads: one producer and one consumer virtual
// thread, one carrier (run with -Djdk.virtualThreadScheduler.parallelism=1
// -Djdk.virtualThreadScheduler.maxPoolSize=1).
//   condvar: one-slot buffer, ReentrantLock + two Conditions (notFull, notEmpty);
//   chan:    ArrayBlockingQueue<Integer>(1).
// ns per item; the consumer checks the sum. Three warm-up rounds (JIT) first.
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

public final class Prodcons {
    interface Body {
        void run() throws InterruptedException;
    }

    static Thread start(Body b) {
        return Thread.ofVirtual().start(() -> {
            try {
                b.run();
            } catch (InterruptedException e) {
                throw new RuntimeException(e);
            }
        });
    }

    static final ReentrantLock lock = new ReentrantLock();
    static final Condition notFull = lock.newCondition(), notEmpty = lock.newCondition();
    static int slot;
    static boolean full;

    static double runCond(int n) throws Exception {
        long[] t = new long[2];
        long[] sum = new long[1];
        Thread cons = start(() -> {
            long s = 0;
            for (int i = 1; i <= n; i++) {
                lock.lock();
                try {
                    while (!full) notEmpty.await();
                    s += slot;
                    full = false;
                    notFull.signal();
                } finally {
                    lock.unlock();
                }
            }
            t[1] = System.nanoTime();
            sum[0] = s;
        });
        Thread prod = start(() -> {
            t[0] = System.nanoTime();
            for (int i = 1; i <= n; i++) {
                lock.lock();
                try {
                    while (full) notFull.await();
                    slot = i;
                    full = true;
                    notEmpty.signal();
                } finally {
                    lock.unlock();
                }
            }
        });
        prod.join();
        cons.join();
        check(n, sum[0]);
        return (double) (t[1] - t[0]) / n;
    }

    static double runChan(int n) throws Exception {
        ArrayBlockingQueue<Integer> q = new ArrayBlockingQueue<>(1);
        long[] t = new long[2];
        long[] sum = new long[1];
        Thread cons = start(() -> {
            long s = 0;
            for (int i = 1; i <= n; i++) s += q.take();
            t[1] = System.nanoTime();
            sum[0] = s;
        });
        Thread prod = start(() -> {
            t[0] = System.nanoTime();
            for (int i = 1; i <= n; i++) q.put(i);
        });
        prod.join();
        cons.join();
        check(n, sum[0]);
        return (double) (t[1] - t[0]) / n;
    }

    static void check(long n, long sum) {
        if (sum != n * (n + 1) / 2) {
            System.err.printf("prodcons: sum %d, want %d%n", sum, n * (n + 1) / 2);
            System.exit(2);
        }
    }

    public static void main(String[] args) throws Exception {
        int n = Util.arg(args, 1000000);
        for (int k = 0; k < 3; k++) {
            runCond(Math.max(1000, n / 5));
            runChan(Math.max(1000, n / 5));
        }
        double cv = runCond(n), ch = runChan(n);
        Util.print("prodcons", "ns_per_item_condvar", cv, "ns");
        Util.print("prodcons", "ns_per_item_chan", ch, "ns");
        Util.print("prodcons", "items", n, "count");
    }
}
