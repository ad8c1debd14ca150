// gotemplate-oracle renders templates with Go's text/template and sprig, as istiod does
// (template.New(name).Funcs(sprig.TxtFuncMap()).Parse(text)), so pilotfish's Python engine
// (app/gotemplate) can be compared with the real thing.
//
// Input: one JSON object per line: {"name", "template", "data", "sprig": bool}. Output: one JSON
// object per line: {"out": "..."} or {"err": "..."} (the parse or execution error), each the
// base64 of its bytes (a template can write bytes that are not UTF-8, which JSON text cannot carry).
//
// Data is JSON with two extensions, so tests reach Go types JSON alone cannot: a number without
// fraction or exponent is an int (else float64), {"$stringmap": {...}} is a map[string]string
// and {"$obj": {...}} is an *Obj (a struct with fields and methods).
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig/v3"
)

// Obj is a struct the templates reach fields and methods of.
type Obj struct {
	Name   string
	Count  int
	Labels map[string]string
	Values map[string]any
	Items  []string
	Child  *Obj
	Any    any
}

func (o *Obj) Greet(who string) string { return "hello " + who + " from " + o.Name }

func (o *Obj) Upper() string { return strings.ToUpper(o.Name) }

func (o *Obj) Fail() (string, error) { return "", fmt.Errorf("failed on %s", o.Name) }

type request struct {
	Name     string          `json:"name"`
	Template string          `json:"template"`
	Data     json.RawMessage `json:"data"`
	Sprig    bool            `json:"sprig"`
}

type response struct {
	Out []byte `json:"out"` // nil (JSON null) when there is an error
	Err []byte `json:"err"`
}

func convert(v any) (any, error) {
	switch v := v.(type) {
	case json.Number:
		if !strings.ContainsAny(string(v), ".eE") {
			i, err := v.Int64()
			return int(i), err
		}
		return v.Float64()
	case []any:
		for i := range v {
			c, err := convert(v[i])
			if err != nil {
				return nil, err
			}
			v[i] = c
		}
		return v, nil
	case map[string]any:
		if sm, ok := v["$stringmap"]; ok && len(v) == 1 {
			out := map[string]string{}
			for k, x := range sm.(map[string]any) {
				out[k] = x.(string)
			}
			return out, nil
		}
		if o, ok := v["$obj"]; ok && len(v) == 1 {
			return toObj(o.(map[string]any))
		}
		for k := range v {
			c, err := convert(v[k])
			if err != nil {
				return nil, err
			}
			v[k] = c
		}
		return v, nil
	}
	return v, nil
}

func toObj(m map[string]any) (*Obj, error) {
	o := &Obj{}
	for k, raw := range m {
		v, err := convert(raw)
		if err != nil {
			return nil, err
		}
		switch k {
		case "Name":
			o.Name = v.(string)
		case "Count":
			o.Count = v.(int)
		case "Labels":
			o.Labels = v.(map[string]string)
		case "Values":
			o.Values = v.(map[string]any)
		case "Items":
			for _, s := range v.([]any) {
				o.Items = append(o.Items, s.(string))
			}
		case "Child":
			if v != nil {
				o.Child = v.(*Obj)
			}
		case "Any":
			o.Any = v
		default:
			return nil, fmt.Errorf("Obj has no field %s", k)
		}
	}
	return o, nil
}

func render(req request) (string, error) {
	t := template.New(req.Name)
	if req.Sprig {
		t = t.Funcs(sprig.TxtFuncMap())
	}
	t, err := t.Parse(req.Template)
	if err != nil {
		return "", err
	}
	var data any
	if len(req.Data) > 0 {
		dec := json.NewDecoder(bytes.NewReader(req.Data))
		dec.UseNumber()
		if err := dec.Decode(&data); err != nil {
			return "", err
		}
		if data, err = convert(data); err != nil {
			return "", err
		}
	}
	var out bytes.Buffer
	if err := t.Execute(&out, data); err != nil {
		return "", err
	}
	return out.String(), nil
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	enc := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var req request
		var resp response
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			resp.Err = []byte("bad request: " + err.Error())
		} else if out, err := render(req); err != nil {
			resp.Err = []byte(err.Error())
		} else {
			resp.Out = []byte(out) // never nil, even when empty
		}
		if err := enc.Encode(resp); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
