// crdcel: the CPU and allocations of a CRD's CEL rules (x-kubernetes-validations) on
// one object, as kube-apiserver 1.34 runs them on a create (defaulted first).
package main

import (
	"context"
	"fmt"
	"os"
	"testing"

	apiextensions "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

func validator(path string) (*cel.Validator, *schema.Structural) {
	raw, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		panic(err)
	}
	var internal apiextensions.JSONSchemaProps
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(
		crd.Spec.Versions[0].Schema.OpenAPIV3Schema, &internal, nil); err != nil {
		panic(err)
	}
	s, err := schema.NewStructural(&internal)
	if err != nil {
		panic(err)
	}
	return cel.NewValidator(s, true, celconfig.PerCallLimit), s
}

func main() {
	// usage: crdcel OBJ.yaml CRD.yaml...
	rawObj, err := os.ReadFile(os.Args[1])
	if err != nil {
		panic(err)
	}
	for round := 0; round < 5; round++ {
		for _, path := range os.Args[2:] {
			v, s := validator(path)
			var obj map[string]interface{}
			if err := yaml.Unmarshal(rawObj, &obj); err != nil {
				panic(err)
			}
			structuraldefaulting.Default(obj, s)
			if errs, _ := v.Validate(context.TODO(), field.NewPath(""), s, obj, nil, celconfig.RuntimeCELCostBudget); len(errs) > 0 {
				panic(errs.ToAggregate())
			}
			r := testing.Benchmark(func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					v.Validate(context.TODO(), field.NewPath(""), s, obj, nil, celconfig.RuntimeCELCostBudget)
				}
			})
			fmt.Printf("round %d %-40s %8.1f µs/create %6d allocs %7d B\n", round+1, path,
				float64(r.NsPerOp())/1000, r.AllocsPerOp(), r.AllocedBytesPerOp())
		}
	}
}
