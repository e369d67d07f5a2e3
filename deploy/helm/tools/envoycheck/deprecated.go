package main

import (
	"fmt"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// deprecatedFields lists the set fields of m, at any depth, that Envoy's
// API marks deprecated: Envoy accepts them with a warning on load, and a
// later release may refuse them.
func deprecatedFields(m protoreflect.Message, path string) []string {
	var out []string
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := string(fd.Name())
		if path != "" {
			p = path + "." + p
		}
		if opts, ok := fd.Options().(*descriptorpb.FieldOptions); ok && opts.GetDeprecated() {
			out = append(out, fmt.Sprintf("%s (%s)", p, fd.FullName()))
		}
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len(); i++ {
				out = append(out, deprecatedFields(v.List().Get(i).Message(), fmt.Sprintf("%s[%d]", p, i))...)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				out = append(out, deprecatedFields(mv.Message(), fmt.Sprintf("%s[%v]", p, k.Interface()))...)
				return true
			})
		case fd.Message() != nil && !fd.IsMap():
			out = append(out, deprecatedFields(v.Message(), p)...)
		}
		return true
	})
	return out
}
