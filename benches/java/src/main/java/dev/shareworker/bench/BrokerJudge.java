package dev.shareworker.bench;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;

/**
 * The broker's view of a run, for the side-by-side driver. One JVM for the whole driver session,
 * reading commands on stdin and answering one JSON line each on stdout:
 *
 * <pre>
 * create-topic TOPIC PARTITIONS   create a topic (replication factor 1), partition P led by the
 *                                 (P mod B)-th broker by id, so every topic of a session has
 *                                 the same layout: {"created":TOPIC,"leaders":[L0,L1,...]}
 * end-offsets TOPIC              the topic's end offsets: {"records":TOTAL,"partitions":[N0,N1,...]}
 * earliest GROUP                  set share.auto.offset.reset=earliest on GROUP (before it exists)
 * group-config GROUP KEY VALUE    set one group config (e.g. share.record.lock.duration.ms) and read it back
 * assigned GROUP                  members of the group with partitions assigned: {"members":M,"assigned":N}
 * lag GROUP                       the group's total lag; {"lag":null} until every partition has state
 * wait GROUP TIMEOUT_MS POLL_MS   poll lag until 0; {"lag":0,"t_ms":EPOCH_MS} or the last lag on timeout
 * delete-groups G1 G2 ...         delete share groups (best effort)
 * delete-topics T1 T2 ...         delete topics (best effort)
 * quit
 * </pre>
 *
 * Lag comes from the Admin API the same way {@code ShareGroupCommand --describe --offsets} gets it.
 */
public final class BrokerJudge {
    private final Admin admin;

    private BrokerJudge(Admin admin) {
        this.admin = admin;
    }

    /** Creates TOPIC with PARTITIONS partitions, partition P on the (P mod B)-th broker by id. */
    private String createTopic(String topic, int partitions) throws Exception {
        List<Integer> brokers = new ArrayList<>();
        admin.describeCluster().nodes().get().forEach(n -> brokers.add(n.id()));
        brokers.sort(null);
        Map<Integer, List<Integer>> layout = new HashMap<>();
        List<String> leaders = new ArrayList<>();
        for (int p = 0; p < partitions; p++) {
            int leader = brokers.get(p % brokers.size());
            layout.put(p, List.of(leader));
            leaders.add(Integer.toString(leader));
        }
        admin.createTopics(List.of(new NewTopic(topic, layout))).all().get();
        return "{\"created\":\"" + topic + "\",\"leaders\":[" + String.join(",", leaders) + "]}";
    }

    public static void main(String[] argv) throws Exception {
        if (argv.length != 1) {
            System.err.println("usage: BrokerJudge BOOTSTRAP  (commands on stdin)");
            System.exit(2);
        }
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, argv[0]);
        try (Admin admin = Admin.create(props)) {
            BrokerJudge judge = new BrokerJudge(admin);
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            System.out.println("{\"ready\":true}");
            System.out.flush();
            String line;
            while ((line = in.readLine()) != null) {
                String[] words = line.trim().split("\\s+");
                if (words.length == 0 || words[0].isEmpty()) {
                    continue;
                }
                if (words[0].equals("quit")) {
                    break;
                }
                String answer;
                try {
                    answer = judge.answer(words);
                } catch (Exception e) {
                    answer = "{\"error\":\"" + String.valueOf(e).replace("\\", "\\\\").replace("\"", "'") + "\"}";
                }
                System.out.println(answer);
                System.out.flush();
            }
        }
    }

    private String answer(String[] words) throws Exception {
        List<String> rest = Arrays.asList(words).subList(1, words.length);
        switch (words[0]) {
            case "create-topic":
                return createTopic(rest.get(0), Integer.parseInt(rest.get(1)));
            case "end-offsets":
                return endOffsets(rest.get(0));
            case "earliest":
                return earliest(rest.get(0));
            case "group-config":
                return groupConfig(rest.get(0), rest.get(1), rest.get(2));
            case "assigned":
                return assigned(rest.get(0));
            case "lag":
                return lagJson(lag(rest.get(0)));
            case "wait":
                return waitForZeroLag(rest.get(0), Long.parseLong(rest.get(1)), Long.parseLong(rest.get(2)));
            case "delete-groups":
                admin.deleteShareGroups(rest).all().get();
                return "{\"deleted\":" + rest.size() + "}";
            case "delete-topics":
                admin.deleteTopics(rest).all().get();
                return "{\"deleted\":" + rest.size() + "}";
            default:
                throw new IllegalArgumentException("unknown command " + words[0]);
        }
    }

    private String endOffsets(String topic) throws Exception {
        TopicDescription description = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
        Map<TopicPartition, OffsetSpec> request = new HashMap<>();
        for (TopicPartitionInfo partition : description.partitions()) {
            request.put(new TopicPartition(topic, partition.partition()), OffsetSpec.latest());
        }
        Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> ends = admin.listOffsets(request).all().get();
        long total = 0;
        StringBuilder partitions = new StringBuilder();
        for (int p = 0; p < description.partitions().size(); p++) {
            long end = ends.get(new TopicPartition(topic, p)).offset();
            total += end;
            partitions.append(p == 0 ? "" : ",").append(end);
        }
        return "{\"records\":" + total + ",\"partitions\":[" + partitions + "]}";
    }

    private String earliest(String group) throws Exception {
        return groupConfig(group, "share.auto.offset.reset", "earliest");
    }

    private String groupConfig(String group, String key, String value) throws Exception {
        ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
        AlterConfigOp op = new AlterConfigOp(new ConfigEntry(key, value), AlterConfigOp.OpType.SET);
        admin.incrementalAlterConfigs(Map.of(resource, List.of(op))).all().get();
        ConfigEntry entry = admin.describeConfigs(List.of(resource)).all().get().get(resource).get(key);
        String now = entry == null ? "unset" : entry.value();
        return "{\"group\":\"" + group + "\",\"" + key + "\":\"" + now + "\"}";
    }

    private String assigned(String group) throws Exception {
        org.apache.kafka.clients.admin.ShareGroupDescription description;
        try {
            description = admin.describeShareGroups(List.of(group)).all().get().get(group);
        } catch (java.util.concurrent.ExecutionException e) {
            if (e.getCause() instanceof org.apache.kafka.common.errors.GroupIdNotFoundException) {
                return "{\"members\":0,\"assigned\":0}";
            }
            throw e;
        }
        int members = description == null ? 0 : description.members().size();
        long partitions = description == null ? 0 : description.members().stream()
            .mapToLong(m -> m.assignment().topicPartitions().size()).sum();
        return "{\"members\":" + members + ",\"assigned\":" + partitions + "}";
    }

    /** Total lag over the group's partitions; null while some partition has no lag yet (no state). */
    private Long lag(String group) throws Exception {
        Map<String, ListShareGroupOffsetsSpec> spec = new HashMap<>();
        spec.put(group, new ListShareGroupOffsetsSpec());
        Map<TopicPartition, SharePartitionOffsetInfo> offsets =
            admin.listShareGroupOffsets(spec).partitionsToOffsetInfo(group).get();
        if (offsets == null || offsets.isEmpty()) {
            return null;
        }
        long total = 0;
        for (SharePartitionOffsetInfo info : offsets.values()) {
            if (info == null || info.lag().isEmpty()) {
                return null;
            }
            total += info.lag().get();
        }
        return total;
    }

    private String waitForZeroLag(String group, long timeoutMs, long pollMs) throws Exception {
        long deadline = System.currentTimeMillis() + timeoutMs;
        Long last = null;
        List<String> errors = new ArrayList<>();
        while (System.currentTimeMillis() < deadline) {
            try {
                last = lag(group);
            } catch (Exception e) {
                errors.add(e.getClass().getSimpleName());
            }
            if (last != null && last == 0) {
                return String.format(Locale.ROOT, "{\"lag\":0,\"t_ms\":%d}", System.currentTimeMillis());
            }
            Thread.sleep(pollMs);
        }
        return String.format(Locale.ROOT, "{\"lag\":%s,\"timeout\":true,\"errors\":%d}", last, errors.size());
    }

    private static String lagJson(Long lag) {
        return "{\"lag\":" + lag + "}";
    }
}
