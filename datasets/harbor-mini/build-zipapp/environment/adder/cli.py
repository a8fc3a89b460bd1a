import sys


def main():
    print(sum(int(a) for a in sys.argv[1:]))
