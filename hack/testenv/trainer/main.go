// The Kubeflow Trainer v2.0.0 controller manager for the test environment: upstream's
// cmd/trainer-controller-manager/main.go (github.com/kubeflow/trainer/v2@v2.0.0) with
// two differences, so that it runs on the test session's terms as JobSet and
// LeaderWorkerSet do (their Configuration's webhook.host and internalCertManagement):
//
//   - its webhook server listens on --webhook-host (default 127.0.0.1), not on every
//     interface: upstream's webhook.Options has no Host and v2.0.0 no flag for one;
//   - it serves the certificate in --cert-dir (tls.crt, tls.key), made by the test
//     session and signed by the control plane's CA, whose caBundle the session puts in
//     the webhook configurations it installs. Upstream's cert-controller rotator
//     (pkg/util/cert) is not started: it makes a certificate for a Service DNS name
//     kube-apiserver cannot reach here, and the controllers wait on it.
//
// Everything else (the scheme, the runtimes, the controllers, the webhooks, the probes)
// is upstream's own code. Built by hack/testenv/peers.sh into the peers' cache; never
// imported.
package main

import (
	"crypto/tls"
	"flag"
	"os"

	zaplog "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	apiruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlpkg "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/kubeflow/trainer/v2/pkg/controller"
	runtimecore "github.com/kubeflow/trainer/v2/pkg/runtime/core"
	webhooks "github.com/kubeflow/trainer/v2/pkg/webhooks"
)

var (
	scheme   = apiruntime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(trainer.AddToScheme(scheme))
	utilruntime.Must(jobsetv1alpha2.AddToScheme(scheme))
	utilruntime.Must(schedulerpluginsv1alpha1.AddToScheme(scheme))
}

func main() {
	var metricsAddr, probeAddr, webhookHost, certDir string
	var webhookPort int
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "The address the metrics endpoint binds to (0: off).")
	flag.StringVar(&probeAddr, "health-probe-bind-address", "127.0.0.1:8081", "The address the probe endpoint binds to.")
	flag.StringVar(&webhookHost, "webhook-host", "127.0.0.1", "The address the webhook server listens on.")
	flag.IntVar(&webhookPort, "webhook-server-port", 9443, "The webhook server's port.")
	flag.StringVar(&certDir, "cert-dir", "", "The folder holding the webhook server's tls.crt and tls.key.")
	opts := zap.Options{
		TimeEncoder: zapcore.RFC3339NanoTimeEncoder,
		ZapOpts:     []zaplog.Option{zaplog.AddCaller()},
	}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	if certDir == "" {
		setupLog.Error(nil, "--cert-dir is required: the folder with the webhook server's tls.crt and tls.key")
		os.Exit(2)
	}

	// upstream's default: no HTTP/2 (the Stream Cancellation and Rapid Reset CVEs)
	tlsOpts := []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:  scheme,
		Client:  client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		Metrics: metricsserver.Options{BindAddress: metricsAddr, TLSOpts: tlsOpts},
		WebhookServer: webhook.NewServer(webhook.Options{
			Host:    webhookHost,
			Port:    webhookPort,
			CertDir: certDir,
			TLSOpts: tlsOpts,
		}),
		HealthProbeBindAddress: probeAddr,
	})
	if err != nil {
		setupLog.Error(err, "unable to start manager")
		os.Exit(1)
	}
	ctx := ctrl.SetupSignalHandler()
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		setupLog.Error(err, "unable to set up health check")
		os.Exit(1)
	}
	// ready once the webhook server listens, as upstream's readyz after its certificates
	if err := mgr.AddReadyzCheck("readyz", mgr.GetWebhookServer().StartedChecker()); err != nil {
		setupLog.Error(err, "unable to set up ready check")
		os.Exit(1)
	}
	runtimes, err := runtimecore.New(ctx, mgr.GetClient(), mgr.GetFieldIndexer())
	if err != nil {
		setupLog.Error(err, "Could not initialize runtimes")
		os.Exit(1)
	}
	// upstream sets these up once its certificates are ready; ours are ready at start
	if failedCtrlName, err := controller.SetupControllers(mgr, runtimes, ctrlpkg.Options{}); err != nil {
		setupLog.Error(err, "Could not create controller", "controller", failedCtrlName)
		os.Exit(1)
	}
	if failedWebhook, err := webhooks.Setup(mgr, runtimes); err != nil {
		setupLog.Error(err, "Could not create webhook", "webhook", failedWebhook)
		os.Exit(1)
	}
	setupLog.Info("Starting manager")
	if err := mgr.Start(ctx); err != nil {
		setupLog.Error(err, "Could not run manager")
		os.Exit(1)
	}
}
