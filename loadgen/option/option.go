// Package option lets the load generator's libraries name their options in
// errors without knowing how a caller spells them. A library writes
//
//	option.Errorf("%s must be at least 1, got %d", option.Name("Concurrency"), n)
//
// whose text names the option as the library's configuration does
// ("Concurrency must be at least 1, got 0"); a command line passes the
// error through Rename with its own spelling of each option (its flags:
// "--concurrency must be at least 1, got 0").
package option

import (
	"fmt"
	"strings"
)

// Name is an option's name as its library's configuration spells it (the
// Go field name, e.g. "MaxConcurrency").
type Name string

// Error is an error about options: a format with an argument of type Name
// for every option it mentions.
type Error struct {
	format string
	args   []any
}

// Errorf returns an *Error: the text of fmt.Errorf(format, args...), in
// which every argument of type Name is an option (and %w wraps as it does
// for fmt.Errorf).
func Errorf(format string, args ...any) error {
	return &Error{format: format, args: args}
}

func (e *Error) Error() string { return e.render(nil).Error() }

// Unwrap returns the errors e wraps (%w).
func (e *Error) Unwrap() []error {
	switch err := e.render(nil).(type) {
	case interface{ Unwrap() []error }:
		return err.Unwrap()
	case interface{ Unwrap() error }:
		return []error{err.Unwrap()}
	}
	return nil
}

// Options lists the options e names, in order.
func (e *Error) Options() []Name {
	var names []Name
	for _, a := range e.args {
		if n, ok := a.(Name); ok {
			names = append(names, n)
		}
	}
	return names
}

// render formats e with every Name spelled by spell (as is when spell is
// nil or returns ""), and every *Error argument rendered the same way.
func (e *Error) render(spell func(Name) string) error {
	args := make([]any, len(e.args))
	for i, a := range e.args {
		switch v := a.(type) {
		case Name:
			s := string(v)
			if spell != nil {
				if t := spell(v); t != "" {
					s = t
				}
			}
			args[i] = s
		case *Error:
			if spell != nil {
				args[i] = v.render(spell)
			} else {
				args[i] = v
			}
		default:
			args[i] = a
		}
	}
	return fmt.Errorf(e.format, args...)
}

// Rename returns err with every option that an *Error in it names spelled
// by spell (a name spell returns "" for stays as it is). The result wraps
// err: errors.Is and errors.As see what they saw in err. Without any
// *Error in err, Rename returns err itself.
func Rename(err error, spell func(Name) string) error {
	if err == nil {
		return nil
	}
	var found []*Error
	collect(err, &found)
	if len(found) == 0 {
		return err
	}
	text := err.Error()
	for _, e := range found {
		text = strings.Replace(text, e.Error(), e.render(spell).Error(), 1)
	}
	return &renamed{text: text, err: err}
}

// collect appends the outermost *Error values in err's tree to found.
func collect(err error, found *[]*Error) {
	if err == nil {
		return
	}
	if oe, ok := err.(*Error); ok {
		*found = append(*found, oe)
		return
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			collect(e, found)
		}
	case interface{ Unwrap() error }:
		collect(u.Unwrap(), found)
	}
}

type renamed struct {
	text string
	err  error
}

func (r *renamed) Error() string { return r.text }
func (r *renamed) Unwrap() error { return r.err }
