package ui

// SetAfterPasswordCheck makes every login run f between its password check and the creation of
// its session, so that tests can commit a change in exactly that gap.
func (u *UI) SetAfterPasswordCheck(f func()) { u.testAfterPasswordCheck = f }
