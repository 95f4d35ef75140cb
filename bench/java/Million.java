// SPDX-License-Identifier: MIT
// million, Java 25 virtual threads: N virtual threads each wait on one
// Condition of one ReentrantLock (like fern_cond + fern_mutex); signalAll,
// then wait until every one has run. bytes_per_thread is the growth of
// VmRSS + VmPTE, so it includes Java heap the JVM committed for them.
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

public final class Million {
    static final ReentrantLock lock = new ReentrantLock();
    static final Condition cv = lock.newCondition();
    static final Condition mainCv = lock.newCondition();
    static int n, parked, finished;
    static boolean wake;

    public static void main(String[] args) throws Exception {
        n = Util.arg(args, 1000000);
        Runnable body = () -> {
            lock.lock();
            try {
                if (++parked == n) mainCv.signal();
                while (!wake) cv.awaitUninterruptibly();
                if (++finished == n) mainCv.signal();
            } finally {
                lock.unlock();
            }
        };
        long m0 = Util.memBytes();
        long t0 = System.nanoTime();
        for (int i = 0; i < n; i++) Thread.ofVirtual().start(body);
        lock.lock();
        try {
            while (parked < n) mainCv.awaitUninterruptibly();
        } finally {
            lock.unlock();
        }
        long t1 = System.nanoTime();
        long m1 = Util.memBytes();
        lock.lock();
        try {
            wake = true;
            cv.signalAll();
            while (finished < n) mainCv.awaitUninterruptibly();
        } finally {
            lock.unlock();
        }
        long t2 = System.nanoTime();
        Util.print("million", "threads", n, "count");
        Util.print("million", "spawn_park_s", (t1 - t0) / 1e9, "s");
        Util.print("million", "bytes_per_thread", (double) (m1 - m0) / n, "bytes");
        Util.print("million", "wake_all_s", (t2 - t1) / 1e9, "s");
    }
}
