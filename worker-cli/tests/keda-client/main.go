// Command keda-client calls a KEDA external scaler the way KEDA does, with the gRPC client KEDA
// generates from its externalscaler.proto (github.com/kedacore/keda/v2/pkg/scalers/externalscaler),
// and prints each answer as one JSON line. A gRPC error is printed too ({"code": ..., "message":
// ...}), so a test can check it.
//
//	keda-client -addr 127.0.0.1:9090 -op is-active|metric-spec|metrics|stream -meta 'group=g;topics=a,b' [-for 30s]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9090", "the scaler's address")
	op := flag.String("op", "is-active", "is-active, metric-spec, metrics or stream")
	meta := flag.String("meta", "", "the trigger metadata: key=value pairs separated by ';'")
	forDuration := flag.Duration("for", 30*time.Second, "how long a stream is read")
	flag.Parse()

	metadata := map[string]string{}
	for _, pair := range strings.Split(*meta, ";") {
		if key, value, ok := strings.Cut(pair, "="); ok {
			metadata[key] = value
		}
	}
	ref := &externalscaler.ScaledObjectRef{Name: "workers", Namespace: "test", ScalerMetadata: metadata}

	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fail(err)
	}
	defer conn.Close()
	client := externalscaler.NewExternalScalerClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), *forDuration+10*time.Second)
	defer cancel()

	switch *op {
	case "is-active":
		answer, err := client.IsActive(ctx, ref)
		if err != nil {
			grpcError(err)
			return
		}
		print(map[string]any{"active": answer.Result})
	case "metric-spec":
		answer, err := client.GetMetricSpec(ctx, ref)
		if err != nil {
			grpcError(err)
			return
		}
		for _, spec := range answer.MetricSpecs {
			print(map[string]any{"name": spec.MetricName, "target": spec.TargetSize, "target_float": spec.TargetSizeFloat})
		}
	case "metrics":
		answer, err := client.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref, MetricName: "share-group-lag"})
		if err != nil {
			grpcError(err)
			return
		}
		for _, value := range answer.MetricValues {
			print(map[string]any{"name": value.MetricName, "value": value.MetricValue, "value_float": value.MetricValueFloat})
		}
	case "stream":
		streamCtx, stop := context.WithTimeout(ctx, *forDuration)
		defer stop()
		stream, err := client.StreamIsActive(streamCtx, ref)
		if err != nil {
			grpcError(err)
			return
		}
		for {
			answer, err := stream.Recv()
			if err != nil {
				if streamCtx.Err() == nil {
					grpcError(err)
				}
				return
			}
			print(map[string]any{"active": answer.Result, "at_ms": time.Now().UnixMilli()})
		}
	default:
		fail(fmt.Errorf("unknown -op %q", *op))
	}
}

func grpcError(err error) {
	s, _ := status.FromError(err)
	print(map[string]any{"code": s.Code().String(), "message": s.Message()})
}

func print(line map[string]any) {
	text, err := json.Marshal(line)
	if err != nil {
		fail(err)
	}
	fmt.Println(string(text))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "keda-client:", err)
	os.Exit(1)
}
