package httpapi

import (
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/wire"
)

// TestOpenAPIMatchesRoutes checks that docs/openapi.yaml documents exactly
// the server's routes, each with a unique operationId, and that public
// routes (no token) are the ones the document marks security: [].
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docs/openapi.yaml")
	require.NoError(t, err)
	var doc struct {
		OpenAPI string                          `yaml:"openapi"`
		Paths   map[string]map[string]yaml.Node `yaml:"paths"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	require.True(t, strings.HasPrefix(doc.OpenAPI, "3."))

	documented := map[string]bool{}
	public := map[string]bool{}
	ids := map[string]string{}
	for path, item := range doc.Paths {
		for method, node := range item {
			if method == "parameters" {
				continue
			}
			var op map[string]yaml.Node
			require.NoError(t, node.Decode(&op), "%s %s", method, path)
			key := strings.ToUpper(method) + " " + path
			documented[key] = true
			var id string
			if n, ok := op["operationId"]; ok {
				id = n.Value
			}
			require.NotEmpty(t, id, "%s has no operationId", key)
			require.Empty(t, ids[id], "operationId %s of %s is also %s", id, key, ids[id])
			ids[id] = key
			if sec, ok := op["security"]; ok && len(sec.Content) == 0 {
				public[key] = true
			}
			_, hasResponses := op["responses"]
			require.True(t, hasResponses, "%s has no responses", key)
		}
	}

	srv, err := New(Config{Client: &pgmsg.Client{}})
	require.NoError(t, err)
	served := map[string]bool{}
	for _, rt := range srv.Routes() {
		key := rt.Method + " " + rt.Pattern
		served[key] = true
		require.Equal(t, rt.Scope == "", public[key], "%s: public in the server iff security: [] in the document", key)
	}
	require.Equal(t, sortedKeys(served), sortedKeys(documented))
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestOpenAPIDocuments2xxBodies checks that every 2xx answer of the
// document says what its body is (one media type with a schema), except
// 204 which has none: the seed aliases' 200s of enqueue and claim said
// nothing, though they answer JSON (found by the HTTP property test).
func TestOpenAPIDocuments2xxBodies(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docs/openapi.yaml")
	require.NoError(t, err)
	var doc struct {
		Paths      map[string]map[string]yaml.Node `yaml:"paths"`
		Components struct {
			Responses map[string]yaml.Node `yaml:"responses"`
		} `yaml:"components"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	type response struct {
		Ref     string                    `yaml:"$ref"`
		Content map[string]map[string]any `yaml:"content"`
	}
	n := 0
	for path, item := range doc.Paths {
		for method, node := range item {
			if method == "parameters" {
				continue
			}
			var op struct {
				Responses map[string]response `yaml:"responses"`
			}
			require.NoError(t, node.Decode(&op))
			for status, resp := range op.Responses {
				if !strings.HasPrefix(status, "2") {
					continue
				}
				if resp.Ref != "" {
					ref := doc.Components.Responses[strings.TrimPrefix(resp.Ref, "#/components/responses/")]
					require.NoError(t, ref.Decode(&resp))
				}
				key := strings.ToUpper(method) + " " + path + " " + status
				n++
				if status == "204" {
					require.Empty(t, resp.Content, key)
					continue
				}
				require.Len(t, resp.Content, 1, "%s documents no body", key)
				for mt, c := range resp.Content {
					require.NotNil(t, c["schema"], "%s %s has no schema", key, mt)
				}
			}
		}
	}
	require.Greater(t, n, 30)
}

// TestOpenAPIJobSchemaHasEveryField checks that the document's Job schema
// names exactly the fields of a job's JSON (wire.JobJSON, as GET
// /v1/jobs/{id}, the job lists and the claims answer): the schema allows
// other properties, so the property test does not see a field the
// server sends that the document lacks (a job field a migration adds,
// as 028 added sequence_key, limit_key and batch_id to job_get).
func TestOpenAPIJobSchemaHasEveryField(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docs/openapi.yaml")
	require.NoError(t, err)
	var doc struct {
		Components struct {
			Schemas struct {
				Job struct {
					Properties map[string]any `yaml:"properties"`
				} `yaml:"Job"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	documented := map[string]bool{}
	for name := range doc.Components.Schemas.Job.Properties {
		documented[name] = true
	}
	sent := map[string]bool{}
	typ := reflect.TypeFor[wire.JobJSON]()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		require.NotEmpty(t, name, "wire.JobJSON.%s has no JSON name", typ.Field(i).Name)
		sent[name] = true
	}
	require.Contains(t, sent, "batch_id")
	require.Equal(t, sortedKeys(sent), sortedKeys(documented), "wire.JobJSON's fields, then the Job schema's properties")
}
