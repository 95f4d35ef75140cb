// SPDX-License-Identifier: MIT
// switch, Java 25 virtual threads: the fern_switch.c scenarios with
// Thread.yield() on one carrier (-Djdk.virtualThreadScheduler.parallelism=1
// -Djdk.virtualThreadScheduler.maxPoolSize=1). Arguments: N MODE.
//   asym: two virtual threads running two different methods, N yields each;
//   rr3:  three threads, three different methods, N each;
//   cold: 10,000 threads round-robin, N yields in all.
// ns per yield call, from the moment every thread runs; three warm-up rounds
// (JIT) precede the measured one.
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.IntConsumer;

public final class Switch {
    static final int COLD_THREADS = 10000;
    static final AtomicInteger started = new AtomicInteger();
    static volatile long startNs;
    static int total;
    static long sumA, xorB, cntC;

    static CountDownLatch go;

    // The clock starts when every thread runs; early arrivals wait blocked
    // (a yield loop would cost O(threads^2) yields with 10,000 threads).
    static void gate() {
        if (started.incrementAndGet() == total) {
            startNs = System.nanoTime();
            go.countDown();
        }
        try {
            go.await();
        } catch (InterruptedException e) {
            throw new RuntimeException(e);
        }
    }

    static void bodyA(int n) {
        gate();
        for (int i = 0; i < n; i++) {
            sumA += i;
            Thread.yield();
        }
    }

    static void bodyB(int n) {
        gate();
        for (int i = 0; i < n; i++) {
            Thread.yield();
            xorB ^= i;
        }
    }

    static void bodyC(int n) {
        gate();
        for (int i = n; i > 0; i--) {
            if ((i & 1) != 0) cntC++;
            Thread.yield();
        }
    }

    static double round(int threads, int per) throws InterruptedException {
        IntConsumer[] bodies = {Switch::bodyA, Switch::bodyB, Switch::bodyC};
        total = threads;
        started.set(0);
        startNs = 0;
        go = new CountDownLatch(1);
        Thread[] t = new Thread[threads];
        for (int i = 0; i < threads; i++) {
            IntConsumer b = threads <= 3 ? bodies[i] : bodies[0];
            t[i] = Thread.ofVirtual().start(() -> b.accept(per));
        }
        for (Thread x : t) x.join();
        return (double) (System.nanoTime() - startNs) / ((double) threads * per);
    }

    public static void main(String[] args) throws Exception {
        int n = Util.arg(args, 1000000);
        String mode = args.length > 1 ? args[1] : "asym";
        int threads, per;
        switch (mode) {
            case "asym" -> { threads = 2; per = n; }
            case "rr3" -> { threads = 3; per = n; }
            case "cold" -> { threads = COLD_THREADS; per = Math.max(1, n / COLD_THREADS); }
            default -> { System.err.println("usage: Switch N asym|rr3|cold"); System.exit(2); return; }
        }
        for (int w = 0; w < 3; w++) round(threads, Math.max(10, per / 5));
        Util.print("switch", "ns_per_switch_" + mode, round(threads, per), "ns");
    }
}
