// SPDX-License-Identifier: MIT
// Java server of the idle-connections scenario (bench/idle/idle.py,
// bench/README.md "Idle connections"): one virtual thread per connection,
// blocked in InputStream.read on a 512-byte array over a blocking
// java.net.Socket, writing back what it reads until the peer closes. The
// accept loop runs on the main (platform) thread.
//   java Idle [--port N] [--workers N]   (--workers ignored: the runner sets
//   -Djdk.virtualThreadScheduler.parallelism)
// Prints "listening on 127.0.0.1:PORT" once ready; SIGTERM ends it.
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;

public final class Idle {
    private Idle() {}

    static void serve(Socket s) {
        try (s) {
            InputStream in = s.getInputStream();
            OutputStream out = s.getOutputStream();
            byte[] buf = new byte[512];
            for (;;) {
                int n = in.read(buf);
                if (n < 0) return;
                out.write(buf, 0, n);
            }
        } catch (IOException e) {
            // the peer went away: the thread ends
        }
    }

    public static void main(String[] args) throws IOException {
        int port = 0;
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--port") && i + 1 < args.length) {
                port = Integer.parseInt(args[++i]);
            } else if (args[i].equals("--workers") && i + 1 < args.length) {
                i++;
            } else {
                System.err.println("usage: java Idle [--port N] [--workers N]");
                System.exit(2);
            }
        }
        ServerSocket ss = new ServerSocket(port, 4096, InetAddress.getByName("127.0.0.1"));
        System.out.println("listening on 127.0.0.1:" + ss.getLocalPort());
        System.out.flush();
        for (;;) {
            Socket s;
            try {
                s = ss.accept();
            } catch (IOException e) {
                System.err.println("accept: " + e);
                try {
                    Thread.sleep(10);
                } catch (InterruptedException ie) {
                    return;
                }
                continue;
            }
            s.setTcpNoDelay(true);
            Thread.ofVirtual().start(() -> serve(s));
        }
    }
}
