package docscheck

import (
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"
)

// descend lists the packages whose structs are configuration sections to
// document key by key. Structs from elsewhere (configtls's client settings,
// component.ID, configopaque) are one key each: their own documentation
// covers what is inside.
var descend = []string{
	"github.com/postgrescopy/postgrescopy/",
	"go.opentelemetry.io/collector/exporter/exporterhelper",
	"go.opentelemetry.io/collector/config/configretry",
}

// configKeys returns every key of the exporter's configuration, nested keys
// joined with "::" as the Collector spells them, elements of a list of
// sections as "name[]::key". Squashed structs (timeout) add their keys at
// their parent's level.
func configKeys() []string {
	var keys []string
	walk(reflect.TypeOf(postgrescopyexporter.Config{}), "", &keys)
	sort.Strings(keys)
	return keys
}

func walk(t reflect.Type, prefix string, keys *[]string) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, ok := f.Tag.Lookup("mapstructure")
		if !ok || tag == "-" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		ft := section(f.Type)
		if strings.Contains(opts, "squash") {
			walk(ft, prefix, keys)
			continue
		}
		key := prefix + name
		*keys = append(*keys, key)
		switch {
		case ft.Kind() == reflect.Struct && descends(ft):
			walk(ft, key+"::", keys)
		case ft.Kind() == reflect.Slice && section(ft.Elem()).Kind() == reflect.Struct && descends(section(ft.Elem())):
			walk(section(ft.Elem()), key+"[]::", keys)
		}
	}
}

// section unwraps what stands between a key and its section: a pointer, or
// configoptional.Optional[T] (whose value field holds the T).
func section(t reflect.Type) reflect.Type {
	for {
		switch {
		case t.Kind() == reflect.Pointer:
			t = t.Elem()
		case t.Kind() == reflect.Struct && strings.HasPrefix(t.PkgPath(), "go.opentelemetry.io/collector/config/configoptional") && strings.HasPrefix(t.Name(), "Optional["):
			v, ok := t.FieldByName("value")
			if !ok {
				return t
			}
			t = v.Type
		default:
			return t
		}
	}
}

func descends(t reflect.Type) bool {
	if t == reflect.TypeOf(time.Duration(0)) {
		return false
	}
	for _, p := range descend {
		if strings.HasPrefix(t.PkgPath(), p) {
			return true
		}
	}
	return false
}
