// Placeholder: replaced by the matrix-multiply peak probe.
int main() { return 0; }
