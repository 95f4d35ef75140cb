// SPDX-License-Identifier: MIT
// Helpers shared by the Java peers of fern's benchmarks. Every program prints
// lines `scenario java metric value unit` on stdout.
import java.nio.file.Files;
import java.nio.file.Path;

final class Util {
    private Util() {}

    static int arg(String[] args, int def) {
        if (args.length > 0) {
            try {
                int v = Integer.parseInt(args[0]);
                if (v > 0) return v;
            } catch (NumberFormatException e) {
                // fall through to the default
            }
        }
        return def;
    }

    static void print(String scenario, String metric, double value, String unit) {
        System.out.printf("%s java %s %.6g %s%n", scenario, metric, value, unit);
    }

    /** A field of /proc/self/status (VmRSS, VmPTE, VmHWM...) in KiB, -1 if absent. */
    static long statusKiB(String field) {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (line.startsWith(field + ":")) {
                    return Long.parseLong(line.substring(field.length() + 1).trim().split("\\s+")[0]);
                }
            }
        } catch (Exception e) {
            return -1;
        }
        return -1;
    }

    /** VmRSS + VmPTE in bytes. */
    static long memBytes() {
        long pte = Math.max(0, statusKiB("VmPTE"));
        return (statusKiB("VmRSS") + pte) * 1024;
    }
}
