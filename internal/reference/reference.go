// Package reference writes the settings reference (docs/reference/) from the
// code itself: gleaner-controller's flags from its FlagSet, the scheduler
// plugins' args from their Go types, doc comments and defaults. Tests compare
// the files with what this package writes, so the documents cannot drift;
// `make docs` rewrites them.
package reference

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"github.com/spf13/pflag"
)

// Flags is a Markdown table of every flag in fs, sorted by name.
func Flags(fs *pflag.FlagSet) string {
	var b strings.Builder
	b.WriteString("| flag | type | default | meaning |\n|---|---|---|---|\n")
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		def := f.DefValue
		if def == "" || def == "[]" {
			def = "none"
		} else {
			def = "`" + def + "`"
		}
		fmt.Fprintf(&b, "| `--%s` | %s | %s | %s |\n", f.Name, f.Value.Type(), def, cell(f.Usage))
	})
	return b.String()
}

// Args is a Markdown table of a plugin's args: every JSON field of the struct
// type named typeName in the Go package at dir (fields of embedded and nested
// structs included, as dotted paths), its type, the value defaulted holds for
// it (args after Default()), and its doc comment. module maps the module path
// to its root directory, for types embedded from other packages.
func Args(module, root, dir, typeName string, defaulted any) (string, error) {
	defaults, err := flatten(defaulted)
	if err != nil {
		return "", err
	}
	p := &pkgs{module: module, root: root, parsed: map[string]*ast.Package{}}
	var rows []row
	if err := p.walk(dir, typeName, "", &rows); err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("| arg | type | default | meaning |\n|---|---|---|---|\n")
	for _, r := range rows {
		def, ok := defaults[r.path]
		if !ok {
			def = "none"
		} else {
			def = "`" + def + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.path, r.kind, def, cell(r.doc))
	}
	return b.String(), nil
}

type row struct{ path, kind, doc string }

type pkgs struct {
	module, root string
	parsed       map[string]*ast.Package
}

func (p *pkgs) pkg(dir string) (*ast.Package, error) {
	if pk, ok := p.parsed[dir]; ok {
		return pk, nil
	}
	all, err := parser.ParseDir(token.NewFileSet(), dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	for _, pk := range all {
		p.parsed[dir] = pk
		return pk, nil
	}
	return nil, fmt.Errorf("no Go package in %s", dir)
}

// walk appends the rows of struct type name in dir, under prefix.
func (p *pkgs) walk(dir, name, prefix string, rows *[]row) error {
	pk, err := p.pkg(dir)
	if err != nil {
		return err
	}
	st, file := findStruct(pk, name)
	if st == nil {
		return fmt.Errorf("no struct type %s in %s", name, dir)
	}
	for _, f := range st.Fields.List {
		tag := ""
		if f.Tag != nil {
			tag = reflect.StructTag(strings.Trim(f.Tag.Value, "`")).Get("json")
		}
		jsonName, _, _ := strings.Cut(tag, ",")
		if jsonName == "-" {
			continue
		}
		typeDir, typeName := p.resolve(dir, file, f.Type)
		if len(f.Names) == 0 { // embedded: its fields are this struct's
			if err := p.walk(typeDir, typeName, prefix, rows); err != nil {
				return err
			}
			continue
		}
		if jsonName == "" {
			jsonName = f.Names[0].Name
		}
		path := prefix + jsonName
		doc := strings.Join(strings.Fields(f.Doc.Text()), " ")
		if typeDir != "" {
			if nested, _ := p.pkg(typeDir); nested != nil {
				if s, _ := findStruct(nested, typeName); s != nil {
					*rows = append(*rows, row{path, "object", doc})
					if err := p.walk(typeDir, typeName, path+".", rows); err != nil {
						return err
					}
					continue
				}
			}
		}
		*rows = append(*rows, row{path, kindOf(f.Type), doc})
	}
	return nil
}

// resolve says where a field's named type lives: its package directory and
// name, or "" for types that are not this module's.
func (p *pkgs) resolve(dir string, file *ast.File, t ast.Expr) (string, string) {
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	switch t := t.(type) {
	case *ast.Ident:
		if ast.IsExported(t.Name) { // builtin types are not
			return dir, t.Name
		}
	case *ast.SelectorExpr:
		x, ok := t.X.(*ast.Ident)
		if !ok {
			return "", ""
		}
		for _, imp := range file.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			local := filepath.Base(path)
			if imp.Name != nil {
				local = imp.Name.Name
			}
			if local == x.Name && strings.HasPrefix(path, p.module+"/") {
				return filepath.Join(p.root, strings.TrimPrefix(path, p.module+"/")), t.Sel.Name
			}
		}
	}
	return "", ""
}

func findStruct(pk *ast.Package, name string) (*ast.StructType, *ast.File) {
	files := make([]string, 0, len(pk.Files))
	for f := range pk.Files {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, fn := range files {
		file := pk.Files[fn]
		for _, d := range file.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, s := range gd.Specs {
				if ts, ok := s.(*ast.TypeSpec); ok && ts.Name.Name == name {
					if st, ok := ts.Type.(*ast.StructType); ok {
						return st, file
					}
				}
			}
		}
	}
	return nil, nil
}

func kindOf(t ast.Expr) string {
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	switch t := t.(type) {
	case *ast.Ident:
		switch {
		case strings.HasPrefix(t.Name, "int") || strings.HasPrefix(t.Name, "uint"):
			return "integer"
		case strings.HasPrefix(t.Name, "float"):
			return "number"
		case t.Name == "bool":
			return "boolean"
		case t.Name == "string":
			return "string"
		}
	case *ast.ArrayType:
		return "list of " + kindOf(t.Elt)
	}
	return "object"
}

// flatten turns v's JSON form into dotted paths and their values.
func flatten(v any) (map[string]string, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	out := map[string]string{}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			if sub, ok := v.(map[string]any); ok {
				walk(prefix+k+".", sub)
				continue
			}
			b, _ := json.Marshal(v)
			out[prefix+k] = strings.Trim(string(b), `"`)
		}
	}
	walk("", doc)
	return out, nil
}

// cell makes text safe inside a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}

// Check compares the file at path with want; with update set it writes want
// there instead. The error tells how to regenerate.
func Check(path, want string, update bool) error {
	if update {
		return os.WriteFile(path, []byte(want), 0o644)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w (run `make docs` to write it)", err)
	}
	if string(got) != want {
		return fmt.Errorf("%s is stale: the code's settings changed; run `make docs` and commit the result", path)
	}
	return nil
}
