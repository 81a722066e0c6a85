// Command keda-client calls a KEDA external scaler the way KEDA does, with the gRPC client KEDA
// generates from its externalscaler.proto (github.com/kedacore/keda/v2/pkg/scalers/externalscaler),
// and prints each answer as one JSON line. A gRPC error is printed too ({"code": ..., "message":
// ...}), so a test can check it.
//
//	keda-client -addr 127.0.0.1:9090 -op is-active|metric-spec|metrics|stream -meta 'group=g;topics=a,b' [-for 30s]
package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9090", "the scaler's address")
	op := flag.String("op", "is-active", "is-active, metric-spec, metrics or stream")
	meta := flag.String("meta", "", "the trigger metadata: key=value pairs separated by ';'")
	forDuration := flag.Duration("for", 30*time.Second, "how long a stream is read")
	caCert := flag.String("ca-cert", "", "the CA of the scaler's certificate (PEM file): speak TLS")
	clientCert := flag.String("tls-client-cert", "", "the client's certificate (PEM file)")
	clientKey := flag.String("tls-client-key", "", "the client's key (PEM file)")
	n := flag.Int("n", 1000, "streams or calls, for -op streams and -op random")
	groups := flag.String("groups", "", "the groups, comma-separated, for -op streams")
	concurrency := flag.Int("concurrency", 32, "calls at once, for -op random")
	flag.Parse()

	metadata := map[string]string{}
	for _, pair := range strings.Split(*meta, ";") {
		if key, value, ok := strings.Cut(pair, "="); ok {
			metadata[key] = value
		}
	}
	ref := &externalscaler.ScaledObjectRef{Name: "workers", Namespace: "test", ScalerMetadata: metadata}

	transport := insecure.NewCredentials()
	if *caCert != "" {
		transport = credentials.NewTLS(tlsConfig(*caCert, *clientCert, *clientKey))
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(transport))
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
	case "health":
		answer, err := grpc_health_v1.NewHealthClient(conn).Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: metadata["service"]})
		if err != nil {
			grpcError(err)
			return
		}
		print(map[string]any{"status": answer.Status.String()})
	case "streams":
		names := strings.Split(*groups, ",")
		streamCtx, stop := context.WithTimeout(ctx, *forDuration)
		defer stop()
		var mu sync.Mutex
		answered, codes := 0, map[string]int{}
		var wg sync.WaitGroup
		for i := 0; i < *n; i++ {
			meta := map[string]string{"group": names[i%len(names)]}
			for key, value := range metadata {
				meta[key] = value
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				stream, err := client.StreamIsActive(streamCtx, &externalscaler.ScaledObjectRef{Name: fmt.Sprintf("o%d", i), Namespace: "test", ScalerMetadata: meta})
				if err == nil {
					_, err = stream.Recv()
				}
				mu.Lock()
				if err != nil {
					s, _ := status.FromError(err)
					codes[s.Code().String()]++
				} else {
					answered++
				}
				mu.Unlock()
				if err == nil {
					// Held open, as KEDA holds it, until the end.
					for {
						if _, err := stream.Recv(); err != nil {
							return
						}
					}
				}
			}()
		}
		// Every stream's first answer, then held until -for runs out.
		deadline := time.Now().Add(*forDuration)
		for time.Now().Before(deadline) {
			mu.Lock()
			done := answered + sum(codes)
			mu.Unlock()
			if done == *n {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		mu.Lock()
		print(map[string]any{"answered": answered, "errors": codes, "at_ms": time.Now().UnixMilli()})
		mu.Unlock()
		wg.Wait()
	case "random":
		var mu sync.Mutex
		codes, messages := map[string]int{}, map[string]string{}
		calls := make(chan int)
		var wg sync.WaitGroup
		for w := 0; w < *concurrency; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range calls {
					name := make([]byte, 12)
					_, _ = rand.Read(name)
					meta := map[string]string{"group": "random-" + hex.EncodeToString(name)}
					for key, value := range metadata {
						meta[key] = value
					}
					_, err := client.IsActive(ctx, &externalscaler.ScaledObjectRef{Name: "r", Namespace: "test", ScalerMetadata: meta})
					s, _ := status.FromError(err)
					mu.Lock()
					codes[s.Code().String()]++
					messages[s.Code().String()] = s.Message()
					mu.Unlock()
				}
			}()
		}
		for i := 0; i < *n; i++ {
			calls <- i
		}
		close(calls)
		wg.Wait()
		print(map[string]any{"codes": codes, "messages": messages})
	default:
		fail(fmt.Errorf("unknown -op %q", *op))
	}
}

func sum(counts map[string]int) int {
	total := 0
	for _, c := range counts {
		total += c
	}
	return total
}

// tlsConfig is what KEDA's external scaler builds from caCert, tlsClientCert and tlsClientKey.
func tlsConfig(caFile, certFile, keyFile string) *tls.Config {
	config := &tls.Config{MinVersion: tls.VersionTLS12}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		fail(err)
	}
	config.RootCAs = x509.NewCertPool()
	if !config.RootCAs.AppendCertsFromPEM(ca) {
		fail(fmt.Errorf("%s: no PEM certificate", caFile))
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			fail(err)
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return config
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
