package dev.shareworker.bench;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/** `--name value` command-line options; `--property k=v` may repeat. Unknown options are an error. */
final class Args {
    private final Map<String, String> values = new HashMap<>();
    private final List<String> properties = new ArrayList<>();

    Args(String[] argv, List<String> known) {
        for (int i = 0; i < argv.length; i++) {
            String name = argv[i];
            if (!name.startsWith("--") || i + 1 >= argv.length) {
                throw new IllegalArgumentException("expected --option value, got: " + name);
            }
            String key = name.substring(2);
            String value = argv[++i];
            if (key.equals("property")) {
                properties.add(value);
            } else if (known.contains(key)) {
                values.put(key, value);
            } else {
                throw new IllegalArgumentException("unknown option --" + key + " (known: " + known + ", property)");
            }
        }
    }

    String required(String key) {
        String value = values.get(key);
        if (value == null) {
            throw new IllegalArgumentException("--" + key + " is required");
        }
        return value;
    }

    String get(String key, String fallback) {
        return values.getOrDefault(key, fallback);
    }

    long getLong(String key, long fallback) {
        String value = values.get(key);
        return value == null ? fallback : Long.parseLong(value);
    }

    int getInt(String key, int fallback) {
        return (int) getLong(key, fallback);
    }

    /** The repeated `--property k=v` values, in order. */
    List<String> properties() {
        return properties;
    }
}
