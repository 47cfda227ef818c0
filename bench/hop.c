/* The floor for the nested path: a minimal static program that does nothing
 * but exec its first argument with the rest of its argv. Compiled by
 * bench/run.sh with `cc -O2 -static`. */
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    execv(argv[1], argv + 1);
    return 127;
}
