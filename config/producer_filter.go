package config

import (
	"regexp"
	"slices"
)

// ProducerFilter is a data source's producer_name_filter (exact names)
// and producer_name_regex_filter (full-match expressions): a producer
// passes if either lists it, as traced's OR; with neither, every one does.
type ProducerFilter struct {
	names   []string
	regexes []*regexp.Regexp
}

// Admits reports whether the producer named producer may serve the data
// source.
func (f ProducerFilter) Admits(producer string) bool {
	if len(f.names) == 0 && len(f.regexes) == 0 {
		return true
	}
	if slices.Contains(f.names, producer) {
		return true
	}
	for _, re := range f.regexes {
		if re.MatchString(producer) {
			return true
		}
	}
	return false
}
