if (cd / && python3 -I -m venv --system-site-packages --without-pip \
        /div/python) 2>/dev/null; then
    for div_pip in pip pip3; do
        printf '#!/bin/sh\nexec /div/python/bin/python -m pip "$@"\n' >/div/python/bin/$div_pip
        chmod +x /div/python/bin/$div_pip
    done
    export VIRTUAL_ENV=/div/python PATH="/div/python/bin:$PATH"
fi
