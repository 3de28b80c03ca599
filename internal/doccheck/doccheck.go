// Package doccheck holds the test that keeps the guides (README.md and
// docs/*.md) in step with the code: every kubectl gleaner command and flag,
// every flag and every gleaner.dev/ key they name exists, and the counts they
// give of what ships are right.
package doccheck
