package systemone

import (
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/kevgo/kev/internal/pyjson"
)

var monthNames = [...]string{"January", "February", "March", "April", "May", "June", "July", "August", "September",
	"October", "November", "December"}

// foundDate is one date found in a text: the text as written and the day it names.
type foundDate struct {
	raw string
	day time.Time
}

// DateFacts returns one sentence per pair of dates in text, stating the days between them ("June 26, 2026 is 8
// days before July 4, 2026."), joined with spaces, or "" when fewer than two dates appear. The model cannot
// subtract dates reliably; it can use a stated day count.
//
// Dates are "<Month> <d or dd>, <yyyy>" (English month names, exact case) and "yyyy-mm-dd", each between word
// boundaries. A date that does not exist (February 30) is skipped; repeats of the same text count once, in order of
// first appearance, so "July 4, 2026" and "2026-07-04" are two dates. For every pair, the later-listed date is
// compared with the earlier-listed one. Only ASCII digits are read as date digits (Python would also read other
// decimal digits there).
func DateFacts(text string) string {
	found := findDates(text)
	var facts []string
	for i := range found {
		for j := i + 1; j < len(found); j++ {
			n := int((found[j].day.Unix() - found[i].day.Unix()) / 86400)
			if n == 0 {
				facts = append(facts, found[j].raw+" is the same day as "+found[i].raw+".")
				continue
			}
			abs, unit, word := n, "days", "after"
			if n < 0 {
				abs, word = -n, "before"
			}
			if abs == 1 {
				unit = "day"
			}
			facts = append(facts, found[j].raw+" is "+strconv.Itoa(abs)+" "+unit+" "+word+" "+found[i].raw+".")
		}
	}
	return strings.Join(facts, " ")
}

// WithDateFacts returns the state with its date facts attached when its rendered text names two or more dates: an
// object gets a "date_facts" member (last, or in place of an existing one), an array one more element
// {"date_facts": facts}, and anything else becomes the string "<state>\n\ndate_facts: <facts>". Otherwise the
// state comes back unchanged.
func WithDateFacts(state pyjson.Value) pyjson.Value {
	return withDateFacts(state, -1)
}

// withDateFacts is WithDateFacts for a state whose text is rendered within max bytes (< 0: no limit): a state
// rendered past max, refused later as over the token limit, comes back unchanged.
func withDateFacts(state pyjson.Value, max int) pyjson.Value {
	text, over := RenderLimit(state, max)
	if over {
		return state
	}
	facts := DateFacts(text)
	if facts == "" {
		return state
	}
	switch state.Kind() {
	case pyjson.KindObject:
		return state.With("date_facts", pyjson.String(facts))
	case pyjson.KindArray:
		return state.Append(pyjson.Object(pyjson.M("date_facts", pyjson.String(facts))))
	}
	return pyjson.String(state.Str() + "\n\ndate_facts: " + facts)
}

// isWordRune is Python's \w for str patterns: letters, numbers and the underscore.
func isWordRune(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r)
}

// findDates scans text left to right as Python's re.finditer does with the two date patterns, keeping the dates
// that exist, each distinct text once.
func findDates(text string) []foundDate {
	var found []foundDate
	seen := map[string]bool{}
	prevWord := false
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRuneInString(text[i:])
		if !prevWord {
			if end, day, valid, ok := matchDate(text, i); ok {
				raw := text[i:end]
				if valid && !seen[raw] {
					seen[raw] = true
					found = append(found, foundDate{raw: raw, day: day})
				}
				if end > i {
					last, _ := utf8.DecodeLastRuneInString(text[:end])
					prevWord = isWordRune(last)
					i = end
					continue
				}
			}
		}
		prevWord = isWordRune(r)
		i += size
	}
	return found
}

// matchDate tries both date patterns at byte i, where a word boundary is already known to hold on the left. It
// returns the end of the match, the day, and whether the matched text names a valid date.
func matchDate(text string, i int) (end int, day time.Time, valid, ok bool) {
	for m, name := range monthNames {
		if !strings.HasPrefix(text[i:], name) {
			continue
		}
		j := i + len(name)
		if j >= len(text) || text[j] != ' ' {
			break
		}
		j++
		// \d{1,2}, backing off to one digit when two do not lead to ", ".
		for _, nd := range []int{2, 1} {
			if !digitsAt(text, j, nd) || !strings.HasPrefix(text[j+nd:], ", ") {
				continue
			}
			k := j + nd + 2
			if !digitsAt(text, k, 4) || !boundaryAfter(text, k+4) {
				continue
			}
			day, valid := realDate(atoi(text[k:k+4]), m+1, atoi(text[j:j+nd]))
			return k + 4, day, valid, true
		}
		break
	}
	if digitsAt(text, i, 4) && len(text) >= i+10 && text[i+4] == '-' && digitsAt(text, i+5, 2) && text[i+7] == '-' &&
		digitsAt(text, i+8, 2) && boundaryAfter(text, i+10) {
		day, valid := realDate(atoi(text[i:i+4]), atoi(text[i+5:i+7]), atoi(text[i+8:i+10]))
		return i + 10, day, valid, true
	}
	return 0, time.Time{}, false, false
}

func digitsAt(s string, i, n int) bool {
	if i+n > len(s) {
		return false
	}
	for _, c := range []byte(s[i : i+n]) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// boundaryAfter reports a word boundary at byte i, where the character before it is a digit (a word character).
func boundaryAfter(s string, i int) bool {
	if i >= len(s) {
		return true
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	return !isWordRune(r)
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// realDate returns the day and true, or false when it does not exist (Python's strptime refuses it: year 0,
// month 13, February 30).
func realDate(year, month, day int) (time.Time, bool) {
	if year < 1 || month < 1 || month > 12 || day < 1 {
		return time.Time{}, false
	}
	t := time.Date(year, time.Month(month), day, 0, 0, 0, 0, time.UTC)
	if t.Year() != year || int(t.Month()) != month || t.Day() != day {
		return time.Time{}, false
	}
	return t, true
}
