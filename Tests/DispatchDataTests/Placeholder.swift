// Tests arrive with the module's issue.
