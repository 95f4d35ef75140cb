// SPDX-License-Identifier: MIT
// Java 25 virtual-thread server peer, hand-written (not com.sun.net.httpserver):
// a platform thread accepts on a blocking ServerSocket and starts one virtual
// thread per connection, which uses blocking socket streams (the JDK parks the
// virtual thread on its poller instead of blocking a carrier).
//
//   java -cp DIR VtServer http|echo [--port N] [--workers N]
//
// http: answers every complete request (GET, ends at an empty line) with the
// plaintext answer (Server, Date, Content-Type, Content-Length; "Hello, World!"),
// all answers of one read batch in one write. echo: writes back what it reads.
// --workers N sets jdk.virtualThreadScheduler.parallelism (carrier threads).
// Prints "listening on 127.0.0.1:PORT"; SIGINT/SIGTERM end the JVM.
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.ZoneOffset;
import java.time.ZonedDateTime;
import java.time.format.DateTimeFormatter;

public class VtServer {
    static volatile byte[] response = build();
    static volatile long responseSec = System.currentTimeMillis() / 1000;

    static byte[] build() {
        String date = DateTimeFormatter.RFC_1123_DATE_TIME.format(ZonedDateTime.now(ZoneOffset.UTC));
        return ("HTTP/1.1 200 OK\r\nServer: java\r\nDate: " + date
                + "\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!")
                .getBytes(StandardCharsets.US_ASCII);
    }

    static byte[] answer() {
        long s = System.currentTimeMillis() / 1000;
        if (s != responseSec) {
            response = build();
            responseSec = s;
        }
        return response;
    }

    static void echo(Socket s) throws Exception {
        InputStream in = s.getInputStream();
        OutputStream out = s.getOutputStream();
        byte[] buf = new byte[65536];
        for (int n; (n = in.read(buf)) > 0; )
            out.write(buf, 0, n);
    }

    static void http(Socket s) throws Exception {
        InputStream in = s.getInputStream();
        OutputStream out = s.getOutputStream();
        byte[] buf = new byte[16384];
        byte[] outBuf = new byte[65536];
        int len = 0;
        for (;;) {
            int n = in.read(buf, len, buf.length - len);
            if (n <= 0)
                return;
            len += n;
            int used = 0, reqs = 0;
            for (int i = 3; i < len; i++) {
                if (buf[i] == '\n' && buf[i - 1] == '\r' && buf[i - 2] == '\n' && buf[i - 3] == '\r') {
                    reqs++;
                    used = i + 1;
                }
            }
            if (used == 0 && len == buf.length)
                return;
            System.arraycopy(buf, used, buf, 0, len - used);
            len -= used;
            byte[] r = answer();
            while (reqs > 0) {
                int ol = 0;
                while (reqs > 0 && ol + r.length <= outBuf.length) {
                    System.arraycopy(r, 0, outBuf, ol, r.length);
                    ol += r.length;
                    reqs--;
                }
                out.write(outBuf, 0, ol);
            }
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1 || !(args[0].equals("http") || args[0].equals("echo"))) {
            System.err.println("usage: VtServer http|echo [--port N] [--workers N]");
            System.exit(2);
        }
        boolean isHttp = args[0].equals("http");
        int port = 0;
        for (int i = 1; i + 1 < args.length; i += 2) {
            if (args[i].equals("--port"))
                port = Integer.parseInt(args[i + 1]);
            else if (args[i].equals("--workers") && Integer.parseInt(args[i + 1]) > 0)
                System.setProperty("jdk.virtualThreadScheduler.parallelism", args[i + 1]);
        }
        ServerSocket ss = new ServerSocket();
        ss.setReuseAddress(true);
        ss.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), port), 4096);
        System.out.println("listening on 127.0.0.1:" + ss.getLocalPort());
        System.out.flush();
        Thread.Builder vb = Thread.ofVirtual();
        for (;;) {
            Socket s = ss.accept();
            s.setTcpNoDelay(true);
            vb.start(() -> {
                try (s) {
                    if (isHttp) http(s); else echo(s);
                } catch (Exception e) {
                    // connection reset by the load generator at the end of a run
                }
            });
        }
    }
}
