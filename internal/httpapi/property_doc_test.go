package httpapi

// What the property test checks answers against, read from the documents
// clients read: docs/openapi.yaml (each operation's query parameters, its
// 2xx statuses with their content types and schemas) and the error table
// of docs/http-api.md (each code with its status).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

type apiDoc struct {
	root map[string]any
	// ops by "METHOD path", as the server's routes name them.
	ops map[string]*docOp
	// codes maps each documented error code to its status.
	codes map[string]int
	// params is every query parameter name of the document, sorted.
	params []string
}

type docOp struct {
	query []string
	// responses maps each documented 2xx status to its body: the media
	// type ("" for none) and schema.
	responses map[int]docBody
}

type docBody struct {
	mediaType string
	schema    any
}

func loadAPIDoc(tb testing.TB) *apiDoc {
	tb.Helper()
	raw, err := os.ReadFile("../../docs/openapi.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	var root map[string]any
	if err := yaml.Unmarshal(raw, &root); err != nil {
		tb.Fatal(err)
	}
	d := &apiDoc{root: root, ops: map[string]*docOp{}}
	params := map[string]bool{}
	paths, _ := root["paths"].(map[string]any)
	for path, item := range paths {
		item, _ := item.(map[string]any)
		shared := docParams(item["parameters"])
		for method, op := range item {
			op, ok := op.(map[string]any)
			if !ok || method == "parameters" {
				continue
			}
			o := &docOp{responses: map[int]docBody{}}
			for _, p := range append(shared, docParams(op["parameters"])...) {
				if p[1] == "query" {
					o.query = append(o.query, p[0])
					params[p[0]] = true
				}
			}
			responses, _ := op["responses"].(map[string]any)
			for status, resp := range responses {
				n, err := strconv.Atoi(status)
				if err != nil || n < 200 || n > 299 {
					continue
				}
				resp := d.resolve(resp).(map[string]any)
				var body docBody
				content, _ := resp["content"].(map[string]any)
				if len(content) > 1 {
					tb.Fatalf("openapi: %s %s %d has %d media types", method, path, n, len(content))
				}
				for mt, c := range content {
					body.mediaType = mt
					if c, ok := c.(map[string]any); ok {
						body.schema = c["schema"]
					}
				}
				o.responses[n] = body
			}
			d.ops[strings.ToUpper(method)+" "+path] = o
		}
	}
	for p := range params {
		d.params = append(d.params, p)
	}
	sort.Strings(d.params)
	d.codes = loadErrorTable(tb)
	return d
}

// docParams returns [name, in] of a parameters list.
func docParams(v any) [][2]string {
	var out [][2]string
	list, _ := v.([]any)
	for _, p := range list {
		p, _ := p.(map[string]any)
		name, _ := p["name"].(string)
		in, _ := p["in"].(string)
		out = append(out, [2]string{name, in})
	}
	return out
}

// resolve follows a {$ref: "#/..."} to what it names.
func (d *apiDoc) resolve(v any) any {
	for {
		m, ok := v.(map[string]any)
		if !ok {
			return v
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return v
		}
		var cur any = d.root
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			cur = cur.(map[string]any)[part]
		}
		v = cur
	}
}

// loadErrorTable reads the status of every code from the Errors table of
// docs/http-api.md: rows "| 404 | `unknown_topic`, ... |", where words in
// parentheses are explanations, not codes.
func loadErrorTable(tb testing.TB) map[string]int {
	tb.Helper()
	raw, err := os.ReadFile("../../docs/http-api.md")
	if err != nil {
		tb.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "\n## Errors\n")
	if !ok {
		tb.Fatal("docs/http-api.md has no Errors section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile(`^\| ([1-5][0-9][0-9]) \| (.*) \|$`)
	paren := regexp.MustCompile(`\([^)]*\)`)
	code := regexp.MustCompile("`([a-z_]+)`")
	codes := map[string]int{}
	for _, line := range strings.Split(section, "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		status, _ := strconv.Atoi(m[1])
		for _, c := range code.FindAllStringSubmatch(paren.ReplaceAllString(m[2], ""), -1) {
			if prev, dup := codes[c[1]]; dup && prev != status {
				tb.Fatalf("docs/http-api.md: code %s under %d and %d", c[1], prev, status)
			}
			codes[c[1]] = status
		}
	}
	if len(codes) < 20 {
		tb.Fatalf("docs/http-api.md: only %d error codes read from the Errors table", len(codes))
	}
	return codes
}

// validate checks a decoded JSON value (json.Number for numbers) against
// a schema of the document: the subset of JSON Schema the document uses
// (type, enum, const, properties, required, additionalProperties, items,
// oneOf, allOf, minimum, maximum, format date-time). It returns the
// violations found.
func (d *apiDoc) validate(schema, v any, at string) []string {
	s, ok := d.resolve(schema).(map[string]any)
	if !ok || schema == nil {
		return nil
	}
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, at+": "+fmt.Sprintf(format, args...)) }
	if t, ok := s["type"]; ok {
		var types []string
		switch t := t.(type) {
		case string:
			types = []string{t}
		case []any:
			for _, x := range t {
				types = append(types, x.(string))
			}
		}
		match := false
		for _, t := range types {
			match = match || jsonType(v, t)
		}
		if !match {
			fail("%s is not of type %v", describeJSON(v), types)
			return errs
		}
	}
	if enum, ok := s["enum"].([]any); ok {
		found := false
		for _, e := range enum {
			found = found || fmt.Sprint(e) == fmt.Sprint(v)
		}
		if !found {
			fail("%s is not one of %v", describeJSON(v), enum)
		}
	}
	if c, ok := s["const"]; ok && fmt.Sprint(c) != fmt.Sprint(v) {
		fail("%s is not %v", describeJSON(v), c)
	}
	if n, ok := v.(json.Number); ok {
		f, _ := n.Float64()
		if min, ok := s["minimum"].(int); ok && f < float64(min) {
			fail("%s is below the minimum %d", n, min)
		}
		if max, ok := s["maximum"].(int); ok && f > float64(max) {
			fail("%s is above the maximum %d", n, max)
		}
	}
	if str, ok := v.(string); ok && s["format"] == "date-time" {
		if _, err := time.Parse(time.RFC3339Nano, str); err != nil {
			fail("%q is not an RFC 3339 date-time", str)
		}
	}
	if obj, ok := v.(map[string]any); ok {
		props, _ := s["properties"].(map[string]any)
		if req, ok := s["required"].([]any); ok {
			for _, r := range req {
				if _, ok := obj[r.(string)]; !ok {
					fail("required property %q is missing", r)
				}
			}
		}
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if ps, ok := props[k]; ok {
				errs = append(errs, d.validate(ps, obj[k], at+"."+k)...)
				continue
			}
			switch ap := s["additionalProperties"].(type) {
			case bool:
				if !ap {
					fail("property %q is not documented", k)
				}
			case map[string]any:
				errs = append(errs, d.validate(ap, obj[k], at+"."+k)...)
			}
		}
	}
	if arr, ok := v.([]any); ok && s["items"] != nil {
		for i, e := range arr {
			errs = append(errs, d.validate(s["items"], e, fmt.Sprintf("%s[%d]", at, i))...)
		}
	}
	if all, ok := s["allOf"].([]any); ok {
		for _, sub := range all {
			errs = append(errs, d.validate(sub, v, at)...)
		}
	}
	if one, ok := s["oneOf"].([]any); ok {
		n := 0
		var why []string
		for _, sub := range one {
			if e := d.validate(sub, v, at); len(e) == 0 {
				n++
			} else {
				why = append(why, e...)
			}
		}
		if n != 1 {
			fail("%s matches %d of the oneOf schemas (want 1): %v", describeJSON(v), n, why)
		}
	}
	return errs
}

func jsonType(v any, t string) bool {
	switch t {
	case "null":
		return v == nil
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "number":
		_, ok := v.(json.Number)
		return ok
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		_, err := strconv.ParseInt(string(n), 10, 64)
		return err == nil
	}
	return false
}

func describeJSON(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 80 {
		b = append(b[:80], "..."...)
	}
	return string(b)
}

// decodeJSONNumbers decodes a whole body, numbers as json.Number.
func decodeJSONNumbers(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("more than one JSON value")
	}
	return v, nil
}

// decodeStrict decodes one JSON value into v as the server decodes request
// bodies (unknown fields refused), and answer bodies in the test.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("more than one JSON value")
	}
	return nil
}

// loneSurrogate returns the offset of a \u escape of a UTF-16 surrogate
// that is not a high one followed by a low one, or -1: JSON that Python,
// jq and serde refuse although Go accepts it. Written apart from the
// server's hasLoneSurrogate so that the test does not check the server
// with its own code.
func loneSurrogate(b []byte) int {
	unit := func(i int) int {
		if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
			return -1
		}
		n, err := strconv.ParseUint(string(b[i+2:i+6]), 16, 32)
		if err != nil {
			return -1
		}
		return int(n)
	}
	inString := false
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] == '"':
			inString = !inString
		case inString && b[i] == '\\':
			u := unit(i)
			switch {
			case u >= 0xD800 && u <= 0xDBFF:
				if lo := unit(i + 6); lo < 0xDC00 || lo > 0xDFFF {
					return i
				}
				i += 11
			case u >= 0xDC00 && u <= 0xDFFF:
				return i
			default:
				i++ // the escaped character (\" included)
			}
		}
	}
	return -1
}
